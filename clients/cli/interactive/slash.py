"""The interactive mode's slash commands: the one table that help, completion and dispatch read."""

from typing import NamedTuple


class SlashCommand(NamedTuple):
    name: str
    arguments: str
    """How its arguments are written in help ("" when it takes none)."""
    summary: str
    needs_argument: bool = False


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("/help", "", "this list"),
    SlashCommand("/new", "", "start a new session (this one stays as it is)"),
    SlashCommand("/sessions", "", "pick a session of this workspace to attach to"),
    SlashCommand("/attach", "ID", "attach to a session by id or prefix", needs_argument=True),
    SlashCommand("/fork", "", "a new session with this conversation, and switch to it"),
    SlashCommand("/rename", "[TITLE]", "title this session (none: its first message's line)"),
    SlashCommand("/undo", "[force]", "restore the files the last turn that changed files changed"),
    SlashCommand("/compact", "", "summarise the older history now"),
    SlashCommand(
        "/image", "FILE|clear", "send an image file with your next message", needs_argument=True
    ),
    SlashCommand("/model", "[NAME]", "list the models, or switch this session's model"),
    SlashCommand("/mode", "[ask|edits|auto]", "show or switch the permission mode"),
    SlashCommand("/todos", "", "the agent's todo list"),
    SlashCommand("/context", "", "how full the context is"),
    SlashCommand("/processes", "", "background processes the daemon runs"),
    SlashCommand("/skills", "", "the skills the agent can load"),
    SlashCommand("/mcp", "", "the MCP servers: state, revision, tools, last error"),
    SlashCommand("/hooks", "", "your hooks, as the next turn runs them"),
    SlashCommand("/trust", "[status|revoke]", "trust this workspace (its own language tools run)"),
    SlashCommand("/cancel", "", "cancel the running turn (also Esc)"),
    SlashCommand("/exit", "", "leave; a running turn keeps running (also Ctrl-D)"),
)

BY_NAME = {command.name: command for command in COMMANDS}

KEYS_HELP = (
    "Enter sends · Alt-Enter or Ctrl-J: new line · Tab completes (@path for files) · "
    "Esc cancels the turn · Ctrl-C clears, twice leaves · Ctrl-D leaves"
)


def parse(text: str) -> tuple[SlashCommand | None, str, str]:
    """(the command, its name as typed, its argument text) for an input line starting with
    `/`; the command is None when no command has that name."""
    name, _, rest = text.strip().partition(" ")
    return BY_NAME.get(name), name, rest.strip()


def help_text() -> str:
    width = max(len(f"{c.name} {c.arguments}".strip()) for c in COMMANDS)
    lines = [f"  {f'{c.name} {c.arguments}'.strip():<{width}}  {c.summary}" for c in COMMANDS]
    return "\n".join([*lines, "", KEYS_HELP])
