"""`tether hooks`: the user's hooks as the next turn would run them."""

import argparse

from tether.clients.cli.commands.output import print_report
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import HOOKS_LIST, HooksListResult


def describe_hooks(listed: HooksListResult) -> str:
    """The listing as lines of text, every character a terminal would hide escaped."""
    lines: list[str] = []
    if listed.error:
        lines.append(f"your config cannot be read now: {visible(listed.error)}")
    if not listed.hooks:
        lines.append(f"no hooks (configure [[hooks]] in {visible(listed.config_file)})")
    width = max([13, *(len(hook.event) for hook in listed.hooks)])
    for hook in listed.hooks:
        match = f"  match {', '.join(visible(rule) for rule in hook.match)}" if hook.match else ""
        name = f"{visible(hook.name)}: " if hook.name else ""
        lines.append(
            f"{hook.event:<{width}} {name}{visible(hook.command)}{match}"
            f"  (timeout {hook.timeout_seconds:g} s)"
        )
    if listed.workspace_ignored:
        lines.append(
            "the workspace's .tether/config.toml sets hooks: not run (only your own config may)"
        )
    return "\n".join(lines)


def cmd_hooks(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listed = client.call(HOOKS_LIST)
    return print_report(listed, as_json=args.json, describe=describe_hooks)
