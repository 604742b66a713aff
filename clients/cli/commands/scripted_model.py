"""Commands built on the scripted model server: `tether demo` shows tether end to end in a
scratch project, `tether dev model-server` serves the scripted model for plugin authors."""

import argparse


def cmd_demo(args: argparse.Namespace) -> int:
    from tether.clients.cli import demo

    return demo.run(json_mode=args.json)


def cmd_dev(args: argparse.Namespace) -> int:
    from tether.testing.__main__ import main as serve

    argv = ["--script", args.script, "--port", str(args.port), "--host", args.host]
    if args.port_file:
        argv += ["--port-file", args.port_file]
    return serve(argv, prog="tether dev model-server", hint=True)
