"""The `tether` subcommands, one module per thing they act on, each loaded only when one of
its commands runs (so that `tether run` does not pay for the others' imports):

turns          run, attach, cancel
chat           chat (and `tether` alone): the interactive session
approvals      approvals, approve, deny
sessions       sessions (list, delete), undo, compact
search         sessions --search
fork           fork
rename         rename
export         export (Markdown by `transcript`, or the event log as JSON lines)
processes      processes (list, kill)
daemon         daemon start/stop/restart/status/ensure, doctor
models         models
scripted_model demo, dev model-server
bridge         bridge: JSON-RPC lines on stdin/stdout, for editors
acp            acp: the Agent Client Protocol agent (tether.clients.acp)
web            web: the page in a browser and its server (tether.clients.web)

A command takes the parsed arguments and returns the exit code (see `exit_codes`), or raises
`CliError`.
"""

import argparse
import importlib
from collections.abc import Callable

Command = Callable[[argparse.Namespace], int]


def load(name: str) -> Command:
    """The command `name` ("module.function", e.g. "turns.cmd_run"), importing its module."""
    module, _, function = name.partition(".")
    command: Command = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return command
