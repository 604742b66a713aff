"""What the language servers said, as the model and the clients see it: `format_report`, the
text appended to an edit's result, and `wire_diagnostics`, the `diagnostics_reported` event's
list, both with paths relative to the workspace."""

from collections.abc import Sequence
from pathlib import Path

import msgspec

from tether.daemon.workspace import display_path
from tether.protocol.events import Diagnostic

REPORT_LIMIT = 15
MAX_MESSAGE_CHARS = 400


def wire_diagnostics(diagnostics: Sequence[Diagnostic], workspace: Path) -> list[Diagnostic]:
    """The diagnostics as the clients get them: workspace-relative paths."""
    root = workspace.resolve()
    return [msgspec.structs.replace(d, path=display_path(root, Path(d.path))) for d in diagnostics]


def format_report(
    diagnostics: Sequence[Diagnostic], workspace: Path, limit: int = REPORT_LIMIT
) -> str:
    """The errors among `diagnostics` as text for the model: a heading, at most `limit` lines
    `path:line:column: error: message [source code]` (paths relative to the workspace), and
    `... and N more`. An error at the same spot as one already listed from another server
    (ruff's F821 and pyright's reportUndefinedVariable) is the same problem and is left out.
    Empty when there is no error."""
    errors: list[Diagnostic] = []
    first_source: dict[tuple[str, int, int], str] = {}
    for d in diagnostics:
        if d.severity != "error":
            continue
        source = first_source.setdefault((d.path, d.line, d.column), d.source)
        if source == d.source:
            errors.append(d)
    if not errors:
        return ""
    root = workspace.resolve()
    lines = ["Errors reported by language servers:"]
    for d in errors[:limit]:
        label = f"{d.source} {d.code}" if d.code else d.source
        lines.append(
            f"{display_path(root, Path(d.path))}:{d.line}:{d.column}: error: "
            f"{_one_line(d.message)} [{label}]"
        )
    if len(errors) > limit:
        lines.append(f"... and {len(errors) - limit} more")
    return "\n".join(lines)


def _one_line(message: str) -> str:
    parts = [part.strip().replace("\xa0", " ") for part in message.splitlines()]
    text = "; ".join(part for part in parts if part)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text
