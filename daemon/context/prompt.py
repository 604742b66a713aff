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


def with_skills(base: str, catalog: str) -> str:
    """The system prompt `base` with the skills `catalog` at its end (`base` itself when the
    catalog is empty)."""
    return f"{base}{catalog}\n" if catalog else base
