"""`tether models`: the models the model server offers, the one this shell's turns call
marked, and those tether sends images to."""

import argparse

from tether.clients.cli.commands.output import print_json
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import MODELS_LIST


def cmd_models(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listed = client.call(MODELS_LIST)
    if args.json:
        print_json(listed)
        return EXIT_OK
    ids = [model.id for model in listed.models]
    for model in listed.models:
        mark = "*" if model.id == listed.current else " "
        print(f"{mark} {visible(model.id)}{'  (images)' if model.images else ''}")
    if listed.current not in ids:
        print(f"* {visible(listed.current)} (in use, but the server does not list it)")
    return EXIT_OK
