"""`tether skills` (and `/skills` in the chat): the skills the agent can load, the invalid ones
and why, and what the catalog costs."""

import argparse

from tether.clients.cli.commands.output import print_report
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import SKILLS_LIST, SkillsListResult


def describe_skills(listed: SkillsListResult) -> str:
    """The listing as lines of text, every character a terminal would hide escaped."""
    if not listed.skills and not listed.invalid:
        return "no skills (looked in " + ", ".join(visible(s) for s in listed.sources) + ")"
    lines: list[str] = []
    width = max((len(skill.name) for skill in listed.skills), default=0)
    for skill in listed.skills:
        trust = "" if skill.trusted else "  [asks before first use]"
        lines.append(
            f"{skill.name:<{width}}  {visible(skill.description)}  ({visible(skill.source)})"
            + trust
        )
        lines += [f"  warning: {visible(warning)}" for warning in skill.warnings]
    if listed.invalid:
        lines.append("not loaded:")
        lines += [f"  {visible(bad.path)}: {visible(bad.reason)}" for bad in listed.invalid]
    if listed.skills:
        workspace = "trusted" if listed.workspace_trusted else "asked before first use"
        lines.append(
            f"catalog: about {listed.catalog_tokens:,} tokens a request; "
            f"workspace skills: {workspace}"
        )
    return "\n".join(lines)


def cmd_skills(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listed = client.call(SKILLS_LIST)
    return print_report(listed, as_json=args.json, describe=describe_skills)
