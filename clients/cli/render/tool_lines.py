"""The lines printed on `err` for good when a tool call completes (its line, an edit's diff, a
command's last lines of output, the images it returned) and when an approval is asked."""

from typing import TYPE_CHECKING

from tether.clients.cli.render.under_way import OUTPUT_KEPT
from tether.clients.core.text import (
    SUCCESS_TAIL_LINES,
    approval_parts,
    describe_image,
    diff_lines,
    failed,
    failure_tail,
    tool_line,
)
from tether.protocol.events import ApprovalRequest
from tether.protocol.items import ToolCall

if TYPE_CHECKING:
    from tether.clients.cli.render.styled import Painter


def completed_call_lines(
    item: ToolCall,
    *,
    elapsed: float | None,
    prefix: str,
    streamed: str,
    previewed: str | None,
    verbose: bool,
    painter: "Painter | None",
) -> list[str]:
    """A finished call's lines: `✓`/`✗` and the call, its diff unless `previewed` (the diff its
    approval showed) is the same, the tail of its output (five lines when it failed, three
    when it succeeded, all that is kept with `verbose`) and a line per image. `prefix` nests
    it under a subagent's task; `painter` styles it (None: plain text)."""
    mark, call, rest = tool_line(item, elapsed)
    mark = f"{prefix}{mark}"
    same = previewed is not None and previewed.strip() == item.diff.strip()
    diff = [] if same else diff_lines(item.diff)
    if failed(item):
        shown = failure_tail(item, streamed)
    else:
        most = OUTPUT_KEPT if verbose else SUCCESS_TAIL_LINES
        shown = failure_tail(item, streamed, most)
    tail = [f"  │ {line}" for line in shown]
    tail += [f"{prefix}  {describe_image(image)}" for image in item.images]
    if painter is None:
        return [f"{mark} {call}{rest}", *diff, *tail]
    bad = failed(item)
    spans = [(f"{mark} ", "bold red" if bad else "green"), (call, "")]
    spans.append((rest, "red" if bad else "dim"))
    return [
        painter.spans(spans),
        *painter.diff(diff),
        *(painter.line(row, "dim") for row in tail),
    ]


def approval_lines(approval: ApprovalRequest, painter: "Painter | None") -> list[str]:
    """What an approval asks, with its preview (a diff, coloured by `painter` if given)."""
    head, preview, after = approval_parts(approval)
    if preview and painter is not None:
        return [*head, *painter.diff(preview.replace("\r\n", "\n").split("\n")), *after]
    return [*head, *([preview] if preview else []), *after]
