"""`tether processes`: list the background processes the daemon owns, show the end of one's
output, or stop one."""

import argparse

from tether.clients.cli.commands.output import print_json, print_listing
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import (
    PROCESS_KILL,
    PROCESS_LIST,
    PROCESS_OUTPUT,
    ProcessInfo,
    ProcessKillParams,
    ProcessOutputParams,
)


def describe_process(p: ProcessInfo) -> str:
    code = "" if p.exit_code is None else f" ({p.exit_code})"
    return f"{p.id}  pid {p.pid:<7} {p.status}{code}  {visible(p.command)}"


def cmd_processes(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.kill:
            client.call(PROCESS_KILL, ProcessKillParams(process_id=args.kill))
            print(f"stopped {args.kill}")
            return EXIT_OK
        if args.output:
            result = client.call(PROCESS_OUTPUT, ProcessOutputParams(process_id=args.output))
            if args.json:
                print_json(result)
                return EXIT_OK
            print(describe_process(result.process))
            if result.truncated:
                print("[… earlier output not shown]")
            text = visible(result.text, multiline=True)
            print(text, end="" if text.endswith("\n") or not text else "\n")
            return EXIT_OK
        processes = client.call(PROCESS_LIST).processes
    return print_listing(
        processes, as_json=args.json, empty="no background processes", line=describe_process
    )
