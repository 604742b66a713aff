"""A session as a readable Markdown transcript (`tether export --format md`).

Layout: the title, a list of the session's metadata, then one section per turn: the prompt,
the answer, each tool call as a `<details>` block (its arguments, its output cut to
`OUTPUT_CHARS`, an edit's diff), a subagent's items nested inside its `task` call's block,
notices as quotes, reasoning and compaction summaries folded, and the turn's summary line.

Everything relayed from the model or a tool is escaped for a terminal (`visible`, newlines
kept). Nothing in a message can close a block early: text that goes in a fence gets a fence
longer than any run of backticks in it, a message's own `<details>` and `<summary>` tags are
escaped, and so is all HTML in a `<summary>`. Messages are otherwise Markdown as written.
"""

import html
import re
import time
from collections.abc import Sequence

import msgspec

from tether.clients.core.text import (
    describe_call,
    describe_image,
    describe_summary,
    outcome,
    visible,
)
from tether.protocol.items import (
    AgentMessage,
    AnyItem,
    Compaction,
    Notice,
    Reasoning,
    ToolCall,
    TurnSummary,
    UserMessage,
)
from tether.protocol.session import SessionSnapshot, TurnSnapshot

OUTPUT_CHARS = 2000
"""A tool call's output is cut to about this much, its head and tail kept."""
_TAIL_CHARS = 500


def transcript(snapshot: SessionSnapshot, configured_model: str = "") -> str:
    """The whole session of `snapshot` as Markdown; `configured_model`: the model a session
    without one of its own uses now."""
    info = snapshot.session
    lines = [f"# {_one_line(info.title) or 'Untitled session'}", ""]
    lines.append(f"- Session: `{info.id}`")
    lines.append(f"- Created: {_when(info.created_at)}")
    lines.append(f"- Last used: {_when(info.updated_at)}")
    lines.append(f"- Turns: {info.turn_count}")
    if info.model:
        lines.append(f"- Model: {_one_line(info.model)}")
    elif configured_model:
        lines.append(f"- Model: {_one_line(configured_model)} (the configured model, as of now)")
    else:
        lines.append("- Model: the configured model (the daemon did not say which)")
    lines.append(f"- Permission mode: {info.permission_mode}")
    if info.forked_from is not None:
        origin = info.forked_from
        after = f" after turn `{origin.turn_id}`" if origin.turn_id else ""
        lines.append(f"- Forked from: `{origin.session_id}`{after}")
    lines.append("")
    for number, turn in enumerate(snapshot.turns, 1):
        lines += _turn(number, turn)
    return "\n".join(lines).rstrip("\n") + "\n"


def _turn(number: int, turn: TurnSnapshot) -> list[str]:
    summary = next((i for i in turn.items if isinstance(i, TurnSummary)), None)
    status = turn.status if summary is None else describe_summary(summary)
    lines = [f"## Turn {number}", "", f"*{_when(turn.started_at)} · {status}* (`{turn.id}`)", ""]
    children: dict[str, list[AnyItem]] = {}
    for item in turn.items:
        if item.parent_item_id:
            children.setdefault(item.parent_item_id, []).append(item)
    lines += _items([i for i in turn.items if not i.parent_item_id], children)
    if turn.error is not None:
        lines += [_quoted(turn.error.message, lead=f"**{turn.error.code}:** "), ""]
    if summary is not None and summary.files_changed:
        lines.append("Files changed:")
        lines.append("")
        for change in summary.files_changed:
            what = "created" if change.created else "deleted" if change.deleted else "changed"
            lines.append(f"- `{_one_line(change.path)}` {what} (+{change.added} -{change.removed})")
        lines.append("")
    return lines


def _items(items: Sequence[AnyItem], children: dict[str, list[AnyItem]]) -> list[str]:
    lines: list[str] = []
    for item in items:
        match item:
            case UserMessage(text=text):
                lines += ["**Prompt**", "", _quoted(text), ""]
                lines += [f"- {describe_image(image)}" for image in item.images]
                lines += [""] if item.images else []
            case AgentMessage(superseded=True):
                pass  # a retried call's partial text: the model never saw it
            case AgentMessage(text=text) if text.strip():
                lines += ["**Answer**", "", _text(text), ""]
            case Reasoning(text=text) if text.strip() and not item.superseded:
                lines += _details("Reasoning", [_fenced(text.strip(), "text")])
            case ToolCall():
                lines += _call(item, children)
            case Notice(level=level, message=message):
                lines += [_quoted(message, lead=f"**{level}:** "), ""]
            case Compaction():
                what = f"Compacted ({item.step}, {item.trigger}):"
                counts = f"{item.tokens_before:,} → {item.tokens_after:,} tokens"
                if item.summary:
                    body = [_text(item.summary)]
                    lines += _details(f"{what} {counts}", body)
                else:
                    lines += [f"*{what} {counts}*", ""]
            case _:
                pass
    return lines


def _call(item: ToolCall, children: dict[str, list[AnyItem]]) -> list[str]:
    rest = outcome(item)
    mark = "✗" if item.status != "completed" or item.exit_code not in (None, 0) else "✓"
    head = f"{mark} {describe_call(item)}" + (f" — {rest}" if rest else "")
    body = ["Arguments:", "", _fenced(_arguments(item.arguments), "json"), ""]
    if item.diff:
        body += ["Diff:", "", _fenced(item.diff.rstrip("\n"), "diff"), ""]
    nested = children.get(item.id, [])
    if nested:
        body += [f"Subagent ({len(nested)} items):", "", *_items(nested, children)]
    if item.output.strip():
        body += ["Output:", "", _fenced(_cut(item.output.rstrip("\n")), "text"), ""]
    return _details(head, body)


def _details(summary: str, body: list[str]) -> list[str]:
    # The blank line after <summary> lets a renderer read the body as Markdown.
    while body and not body[-1]:
        body = body[:-1]
    return [
        f"<details><summary>{html.escape(summary)}</summary>",
        "",
        *body,
        "",
        "</details>",
        "",
    ]


def _arguments(text: str) -> str:
    try:
        decoded = msgspec.json.decode(text or "{}")
    except msgspec.DecodeError:
        return text  # invalid JSON from the model: shown as it came
    return msgspec.json.format(msgspec.json.encode(decoded), indent=2).decode()


def _cut(text: str) -> str:
    if len(text) <= OUTPUT_CHARS:
        return text
    head = text[: OUTPUT_CHARS - _TAIL_CHARS]
    tail = text[-_TAIL_CHARS:]
    return f"{head}\n[… {len(text) - OUTPUT_CHARS:,} characters cut …]\n{tail}"


def _fenced(text: str, language: str) -> str:
    runs = [len(run) for run in re.findall(r"`{3,}", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{language}\n{visible(text, multiline=True)}\n{fence}"


def _quoted(text: str, *, lead: str = "") -> str:
    lines = _text(text).split("\n")
    lines[0] = lead + lines[0]
    return "\n".join(f"> {line}" if line else ">" for line in lines)


_STRUCTURE = re.compile(r"<(?=/?(?:details|summary)\b)", re.IGNORECASE)
"""The tags the transcript's own blocks are made of: a message's copy of one is escaped, so
it cannot close or open a block."""


def _text(text: str) -> str:
    """A message's Markdown as it is, escaped for a terminal, its block tags disarmed."""
    return _STRUCTURE.sub("&lt;", visible(text.strip(), multiline=True))


def _one_line(text: str) -> str:
    return _STRUCTURE.sub("&lt;", visible(" ".join(text.split())))


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
