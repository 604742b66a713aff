"""Commands built on the scripted model server: `tether demo` runs one turn end to end in a
scratch project, `tether dev model-server` serves the scripted model for plugin authors."""

import argparse
import os
import sys

from tether.clients.cli import demo
from tether.clients.cli.exit_codes import STATUS_EXIT
from tether.clients.cli.follow import Follower
from tether.clients.cli.render import Renderer
from tether.clients.discovery import locate, wait_until_stopped
from tether.clients.rpc import Client
from tether.protocol.methods import (
    DAEMON_SHUTDOWN,
    SESSION_CREATE,
    TURN_START,
    SessionCreateParams,
    TurnStartParams,
)


def cmd_demo(args: argparse.Namespace) -> int:
    print(demo.BANNER, file=sys.stderr)
    folder = demo.scratch()
    project = folder / "greeter"
    demo.make_project(project)
    model, url = demo.start_model_server(demo.write_script(folder))
    env = {**os.environ, "TETHER_BASE_URL": url, "TETHER_MODEL": "scripted"}
    try:
        locate(project, idle_timeout=60, env=env)
        with Client.connect(project, autostart=False) as client:
            print(f"workspace: {project}\n» what is this project?\n", file=sys.stderr)
            session = client.call(SESSION_CREATE, SessionCreateParams(title="demo")).session
            follower = Follower(
                client, session.id, Renderer(json_mode=args.json), answer_approvals=False
            )
            follower.attach()
            turn_id = client.call(
                TURN_START,
                TurnStartParams(session_id=session.id, text="What is this project?"),
            ).turn_id
            status = follower.follow(turn_id)
            client.call(DAEMON_SHUTDOWN)
        # The demo's daemon is this process's child: wait for it to finish stopping (it
        # releases its lock last), so nothing of the demo outlives the command.
        wait_until_stopped(project)
    finally:
        model.terminate()
        model.wait(timeout=10)
        demo.cleanup(folder)
    print(f"\ndemo turn {status}.", file=sys.stderr)
    return STATUS_EXIT[status]


def cmd_dev(args: argparse.Namespace) -> int:
    from tether.testing.__main__ import main as serve

    argv = ["--script", args.script, "--port", str(args.port), "--host", args.host]
    if args.port_file:
        argv += ["--port-file", args.port_file]
    return serve(argv, prog="tether dev model-server", hint=True)
