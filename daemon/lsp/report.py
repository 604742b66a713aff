"""What the language servers said, as the model and the clients see it: `format_report`, the
text appended to an edit's result, and `wire_diagnostics`, the `diagnostics_reported` event's
list, both with paths relative to the workspace.

Given the call's `Coverage`, the report also says which servers checked the files and which
did not answer, so that the model can tell "no errors" from "not checked":

    Errors reported by language servers:
    app.py:3:5: error: ... [basedpyright reportAssignmentType]
    Checked by basedpyright, ruff.

    No errors reported by language servers (checked by basedpyright, ruff).
    Not checked by typescript (still starting: no answer within 10 s): its errors are unknown.
"""

from collections.abc import Sequence
from pathlib import Path

import msgspec

from tether.daemon.lsp.diagnostics import Coverage
from tether.daemon.workspace import display_path
from tether.protocol.events import Diagnostic

REPORT_LIMIT = 15
MAX_MESSAGE_CHARS = 400


def wire_diagnostics(diagnostics: Sequence[Diagnostic], workspace: Path) -> list[Diagnostic]:
    """The diagnostics as the clients get them: workspace-relative paths."""
    root = workspace.resolve()
    return [msgspec.structs.replace(d, path=display_path(root, Path(d.path))) for d in diagnostics]


def format_report(
    diagnostics: Sequence[Diagnostic],
    workspace: Path,
    limit: int = REPORT_LIMIT,
    coverage: Coverage | None = None,
) -> str:
    """The errors among `diagnostics` as text for the model: a heading, at most `limit` lines
    `path:line:column: error: message [source code]` (paths relative to the workspace), and
    `... and N more`. An error at the same spot as one already listed from another server
    (ruff's F821 and pyright's reportUndefinedVariable) is the same problem and is left out.
    With `coverage`, then the servers that checked the files and those that did not answer
    (see the module docstring); without, empty when there is no error, as when no server
    was asked."""
    listed = _error_lines(diagnostics, workspace, limit)
    if coverage is None:
        return "\n".join(listed)
    checked = ", ".join(coverage.checked)
    lines = list(listed)
    if listed and checked:
        lines.append(f"Checked by {checked}.")
    elif checked:
        lines.append(f"No errors reported by language servers (checked by {checked}).")
    if coverage.unanswered:
        missing = "; ".join(f"{u.server} ({u.reason})" for u in coverage.unanswered)
        lines.append(f"Not checked by {missing}: their errors are unknown.")
    return "\n".join(lines)


def _error_lines(diagnostics: Sequence[Diagnostic], workspace: Path, limit: int) -> list[str]:
    errors: list[Diagnostic] = []
    first_source: dict[tuple[str, int, int], str] = {}
    for d in diagnostics:
        if d.severity != "error":
            continue
        source = first_source.setdefault((d.path, d.line, d.column), d.source)
        if source == d.source:
            errors.append(d)
    if not errors:
        return []
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
    return lines


def _one_line(message: str) -> str:
    parts = [part.strip().replace("\xa0", " ") for part in message.splitlines()]
    text = "; ".join(part for part in parts if part)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text
