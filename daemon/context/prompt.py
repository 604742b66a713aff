"""The system prompt: the first message of every conversation, identical on every step of a
session so that providers can cache the prompt prefix. It is built once per session (when the
daemon creates or loads it); per-turn context (the repository's instructions, mentions) goes
into the user's messages instead.

The one part that may change between turns is the skills catalog at its end (`with_skills`),
and only when the skills, or the set of them that match the files in play, changed: without
skills the prompt is exactly the base."""

from pathlib import Path

from tether.daemon.context.instructions import environment_block


def system_prompt(workspace: Path) -> str:
    return (
        "You are tether, a coding agent working in a software project on the user's machine.\n"
        "Work step by step: look at the code with the tools before you change or explain it, "
        "and keep answers short and concrete. Paths are relative to the workspace root.\n"
        "Edit a file only after reading it; prefer small, exact edits. Run tests or builds "
        "when it is worth it, and say what you verified.\n\n"
        f"{environment_block(workspace)}\n"
    )


SUBAGENT_ROLES = {
    "explore": "You can only look: read, search and list files. You cannot change anything.",
    "general": "You can read, edit and write files and run commands.",
}


def subagent_prompt(workspace: Path, subagent_type: str) -> str:
    """The system prompt of a subagent (the `task` tool) of type `explore` or `general`."""
    return (
        "You are a tether subagent: another agent handed you the task in the next message "
        "and sees only your final reply. You see nothing of its conversation.\n"
        f"{SUBAGENT_ROLES[subagent_type]} Paths are relative to the workspace root.\n"
        "Work with the tools until the task is done, then reply once with the report it asks "
        "for: concrete findings with path:line, what you changed and verified, and what is "
        "left open. Keep it short; do not ask questions back.\n\n"
        f"{environment_block(workspace)}\n"
    )


def with_skills(base: str, catalog: str) -> str:
    """The system prompt `base` with the skills `catalog` at its end (`base` itself when the
    catalog is empty)."""
    return f"{base}{catalog}\n" if catalog else base
