"""A turn as a cell output: one MIME bundle, `text/html` for notebooks, `text/plain` for the
rest (a terminal IPython, a diff of the saved notebook).

The pieces are the plain ones the CLI shows too (`tether.clients.core.text`): the same tool lines,
diff cuts, approval prompts and summaries, so a notebook and a terminal say the same things.

Everything the daemon relays is model-made and is escaped before it is shown: first `visible`
(control, bidi and invisible characters written as escapes), then, for HTML, `html.escape`
or the Markdown renderer with raw HTML off, so a reply cannot put markup, scripts or styles
into the notebook. Images in replies are not rendered either: a remote image is fetched as
soon as it is shown, which would let a reply send what it read to any server it names.
"""

import html
from functools import cache

import msgspec
from markdown_it import MarkdownIt

from tether.clients.core.text import (
    SPINNER,
    approval_parts,
    describe_call,
    describe_image,
    describe_subject,
    describe_summary,
    diff_lines,
    failed,
    output_tail,
    tool_line,
    visible,
)
from tether.jupyter.view import TurnView
from tether.protocol.events import ApprovalRequest
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Notice,
    Reasoning,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.methods import PendingApproval
from tether.protocol.session import SessionInfo

Bundle = dict[str, str]
"""A MIME bundle: `{"text/html": ..., "text/plain": ...}`."""

_MONO = "font-family: var(--jp-code-font-family, monospace); white-space: pre-wrap"
_DIM = "opacity: 0.7"
_DIFF_COLOURS = {"+": "#22863a", "-": "#cb2431", "@": "#6f42c1"}


@cache
def _markdown() -> MarkdownIt:
    # markdown-it-py comes with rich, one of tether's own dependencies.
    return (
        MarkdownIt("commonmark", {"html": False, "linkify": False})
        .enable(["table", "strikethrough"])
        .disable("image")
    )


def markdown_html(text: str) -> str:
    """Model Markdown as HTML: its own HTML shown as text, no images (see the module)."""
    return _markdown().render(visible(text, multiline=True))


_EDIT_TOOLS = frozenset({"edit_file", "write_file"})


def shown_call(call: ToolCall) -> ToolCall:
    """The call as its line shows it: an edit by its path alone (its diff says the rest,
    where the strings it replaced would only repeat it)."""
    if call.tool not in _EDIT_TOOLS:
        return call
    try:
        args = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError:
        return call
    if not isinstance(args, dict) or not isinstance(path := args.get("path"), str):  # type: ignore[union-attr]
        return call
    return msgspec.structs.replace(call, arguments=msgspec.json.encode({"path": path}).decode())


def command_tail(call: ToolCall) -> list[str]:
    """The last lines of a finished command's output, as the CLI shows a command's: the
    result without its `exit code` header; none for other calls."""
    if call.exit_code is None or call.status != "completed":
        return []
    _, _, body = call.output.partition("\n")
    return [] if body.strip() == "(no output)" else output_tail(body)


def answer_lines(approval: ApprovalRequest) -> list[str]:
    """The magics that answer `approval`."""
    lines = [f"%tether approve {approval.id}", f"%tether deny {approval.id}"]
    if approval.always_rule:
        lines.insert(1, f"%tether approve --always {approval.id}")
    return lines


def turn_bundle(view: TurnView) -> Bundle:
    """The whole turn as `view` holds it, with its pending approvals and its note."""
    return {"text/html": _turn_html(view), "text/plain": turn_text(view)}


# --- plain text ---------------------------------------------------------------------------------


def turn_text(view: TurnView) -> str:
    lines: list[str] = []
    for item in view.items.values():
        lines += _item_text(item, view.running)
    lines += [f"(queued, joins at the next step) {visible(text)}" for text in view.queued.values()]
    if view.retry:
        lines.append(visible(view.retry))
    if view.running and not view.pending and not _busy(view):
        lines.append("thinking…")
    lines += [f"  {visible(line)}" for line in view.resolved]
    for approval in view.pending.values():
        head, preview, after = approval_parts(approval)
        lines += [*head, *([preview] if preview else []), *after]
        lines.append("  answer: " + " · ".join(answer_lines(approval)))
    if view.error and view.status != "completed":
        lines.append(f"error: {visible(view.error)}" if view.status == "failed" else view.error)
    if view.note:
        lines.append(visible(view.note))
    return "\n".join(lines) + "\n"


def _item_text(item: AnyItem, running: bool) -> list[str]:
    match item:
        case UserMessage(text=text, images=images):
            return [f"» {visible(text, multiline=True)}", *map(describe_image, images)]
        case AgentMessage(text=text):
            return [visible(text, multiline=True)] if text else []
        case Reasoning(text=text):
            return [f"✻ {visible(text.strip().splitlines()[-1])}"] if running and text else []
        case ToolCall(status="running") as call:
            tail = [f"  │ {line}" for line in output_tail(call.output)]
            return [f"{SPINNER[0]} {describe_call(shown_call(call))}", *tail]
        case ToolCall() as call:
            mark, shown, rest = tool_line(shown_call(call))
            tail = [f"  │ {line}" for line in command_tail(call)]
            return [f"{mark} {shown}{rest}", *diff_lines(call.diff), *tail]
        case Notice(level=level, message=message):
            return [f"{level}: {visible(message, multiline=True)}"]
        case TurnSummary() as summary:
            return [describe_summary(summary)]
        case _:
            return []


def _busy(view: TurnView) -> bool:
    """Whether something visibly runs (a call, or a reply or reasoning streaming)."""
    last = next(reversed(view.items.values()), None)
    match last:
        case ToolCall(status="running") | AgentMessage() | Reasoning():
            return True
        case _:
            return any(
                isinstance(i, ToolCall) and i.status == "running" for i in view.items.values()
            )


# --- HTML ---------------------------------------------------------------------------------------


def _esc(text: str) -> str:
    return html.escape(visible(text), quote=True)


def _turn_html(view: TurnView) -> str:
    parts: list[str] = []
    for item in view.items.values():
        parts.append(_item_html(item, view.running))
    for text in view.queued.values():
        parts.append(f'<div style="{_DIM}">(queued, joins at the next step) {_esc(text)}</div>')
    if view.retry:
        parts.append(f'<div style="{_DIM}">{_esc(view.retry)}</div>')
    if view.running and not view.pending and not _busy(view):
        parts.append(f'<div style="{_DIM}">thinking…</div>')
    parts += [f'<div style="{_DIM}">{_esc(line)}</div>' for line in view.resolved]
    parts += [_approval_html(approval) for approval in view.pending.values()]
    if view.error and view.status != "completed":
        colour = "#cb2431" if view.status == "failed" else "#b08800"
        parts.append(f'<div style="color: {colour}">{_esc(view.error)}</div>')
    if view.note:
        parts.append(f'<div style="{_DIM}; font-style: italic">{_esc(view.note)}</div>')
    return f'<div class="tether-turn" data-turn="{_esc(view.turn_id)}">{"".join(parts)}</div>'


def _item_html(item: AnyItem, running: bool) -> str:
    match item:
        case UserMessage(text=text, images=images):
            shown = "".join(f"<div>{_esc(describe_image(image))}</div>" for image in images)
            return f'<div style="{_DIM}; {_MONO}">» {_esc_lines(text)}{shown}</div>'
        case AgentMessage(text=text):
            return f'<div class="tether-answer">{markdown_html(text)}</div>' if text else ""
        case Reasoning(text=text) if text:
            opened = " open" if running else ""
            return (
                f'<details{opened} style="{_DIM}"><summary>reasoning</summary>'
                f'<div style="{_MONO}">{_esc_lines(text)}</div></details>'
            )
        case ToolCall(status="running") as call:
            tail = output_tail(call.output)
            described = _esc(describe_call(shown_call(call)))
            return f'<div style="{_MONO}">{SPINNER[0]} {described}</div>' + (
                _pre([f"  │ {line}" for line in tail]) if tail else ""
            )
        case ToolCall() as call:
            mark, shown, rest = tool_line(shown_call(call))
            colour = "#cb2431" if failed(call) else "#22863a"
            line = (
                f'<div class="tether-tool" style="{_MONO}"><span style="color: {colour}">'
                f'{mark}</span> {html.escape(shown)}<span style="{_DIM}">'
                f"{html.escape(rest)}</span></div>"
            )
            tail = [f"  │ {t}" for t in command_tail(call)]
            return line + _diff_html(diff_lines(call.diff)) + (_pre(tail) if tail else "")
        case Notice(level=level, message=message):
            colour = {"error": "#cb2431", "warning": "#b08800"}.get(level, "inherit")
            return f'<div style="color: {colour}">{_esc(level)}: {_esc_lines(message)}</div>'
        case TurnSummary() as summary:
            return f'<div style="{_DIM}; font-size: 0.9em">{_esc(describe_summary(summary))}</div>'
        case _:
            return ""


def _esc_lines(text: str) -> str:
    return html.escape(visible(text, multiline=True), quote=True)


def _pre(lines: list[str]) -> str:
    """Lines already made visible, as a preformatted block."""
    body = html.escape("\n".join(lines))
    return f'<pre style="{_MONO}; margin: 0.2em 0">{body}</pre>'


def _diff_html(lines: list[str]) -> str:
    if not lines:
        return ""
    rows: list[str] = []
    for line in lines:
        colour = _DIFF_COLOURS.get(line[:1]) if not line.startswith(("+++", "---")) else None
        shown = html.escape(line)
        rows.append(f'<span style="color: {colour}">{shown}</span>' if colour else shown)
    return f'<pre style="{_MONO}; margin: 0.2em 0">{chr(10).join(rows)}</pre>'


def _approval_html(approval: ApprovalRequest) -> str:
    head, preview, after = approval_parts(approval)
    body = _pre(head)
    if preview:
        body += _diff_html(preview.split("\n"))
    if after:
        body += _pre(after)
    answers = " · ".join(f"<code>{html.escape(line)}</code>" for line in answer_lines(approval))
    return (
        '<div class="tether-approval" style="border-left: 3px solid #b08800;'
        f' padding-left: 0.6em; margin: 0.4em 0">{body}<div>answer: {answers}</div></div>'
    )


# --- other outputs ------------------------------------------------------------------------------


def message_bundle(text: str) -> Bundle:
    """One line of tether's own (already made visible where it relays anything)."""
    return {"text/html": f'<div style="{_DIM}">{html.escape(text)}</div>', "text/plain": text}


def sessions_bundle(sessions: list[SessionInfo], current: str | None) -> Bundle:
    """The workspace's sessions, newest first; `current` (the notebook's) is marked."""
    if not sessions:
        return message_bundle("this workspace has no sessions yet; start one with %%tether")
    rows: list[str] = []
    plain: list[str] = []
    for s in sessions:
        mark = "*" if s.id == current else " "
        title = visible(s.title) or "(untitled)"
        turns = f"{s.turn_count} turn{'s' if s.turn_count != 1 else ''}"
        plain.append(f"{mark} {s.id}  {s.state:<18} {turns:<9} {title}")
        cells = [mark, s.id, s.state, turns, title]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("", "session", "state", "turns", "title"))
    table = f'<table class="tether-sessions"><tr>{head}</tr>{"".join(rows)}</table>'
    return {"text/html": table, "text/plain": "\n".join(plain)}


def answered_bundle(picked: PendingApproval, verb: str) -> Bundle:
    return message_bundle(
        f"{verb} {visible(picked.approval.tool)}: {describe_subject(picked.approval)}"
    )
