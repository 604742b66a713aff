"""What a client says of a turn, as plain text: escaping, tool lines, approvals, summaries, tails.

Everything the daemon relays (model text, commands, paths, diffs, output, messages) passes
through `visible` before it reaches a terminal: a control character could otherwise move the
cursor, erase a line or hide the rest of an approval prompt, and a bidi control could reorder
what a person reads. Nothing here imports rich: plain output stays cheap to start.
"""

import signal
import unicodedata

import msgspec

from tether.protocol.events import ApprovalRequest, ToolProgress
from tether.protocol.images import describe_size
from tether.protocol.items import ImageRef, ToolCall, TurnSummary

MAX_ARGS_SHOWN = 120
TAIL_LINES = 5
"""Lines of a command's output shown while it runs, and when it fails."""
SUCCESS_TAIL_LINES = 3
"""Lines of a command's output kept on screen when it succeeds (`--verbose`: all)."""
DIFF_LINES = 80
"""Lines of an edit's diff shown; the rest is counted."""
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


TIMES = "\N{MULTIPLICATION SIGN}"
FAILURE_SHOWN = 200
"""Characters of a failed call's first output line shown on its line."""


def shorten(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters, else cut to fit with "…": at the last space
    when one is in its second half (so that no word is cut), else in the middle of a word."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if not text[limit - 1].isspace() and space >= limit // 2:
        head = head[:space]
    return head.rstrip() + "…"


def describe_image(image: ImageRef) -> str:
    """One line for an image sent with a message, `[image shot.png 1280x720, 210 KB]` (with a
    multiplication sign), and what it was before the daemon downscaled it, if it did."""
    line = f"[image {visible(image.name)} {image.width}{TIMES}{image.height}"
    line += f", {describe_size(image.size)}"
    if image.original_size:
        line += (
            f", downscaled from {image.original_width}{TIMES}{image.original_height}"
            f" {describe_size(image.original_size)}"
        )
    return line + "]"


def visible(text: str, *, multiline: bool = False) -> str:
    """`text` with every character that a terminal would not show as itself written as an
    escape (`\\x1b`, `\\r`, `\\x07`, `\\u202e`): control characters (escape sequences,
    carriage returns, bells, …), bidi controls, zero-width and other format characters, line
    and paragraph separators. Tabs and spaces stay; newlines (and a CR right before one) stay
    only when `multiline`."""
    if text.isprintable():
        return text
    out: list[str] = []
    for index, ch in enumerate(text):
        shown = ch.isprintable() or ch == "\t" or unicodedata.category(ch) == "Zs"
        if not shown and multiline:
            shown = ch == "\n" or (ch == "\r" and text[index + 1 : index + 2] == "\n")
        out.append(ch if shown else ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def describe_call(item: ToolCall) -> str:
    """`tool(arg=value, …)` on one line, escaped, the arguments cut at `MAX_ARGS_SHOWN`; a
    `task` call as `task(explore: its description)`."""
    try:
        args = msgspec.json.decode(item.arguments or "{}")
    except msgspec.DecodeError:
        shown = item.arguments
    else:
        if item.tool == "task" and isinstance(args, dict) and "description" in args:
            kind = args.get("subagent_type") or "explore"  # type: ignore[union-attr]
            shown = f"{kind}: {args['description']}"  # type: ignore[index]
        elif isinstance(args, dict):
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())  # type: ignore[union-attr]
        else:
            shown = repr(args)
    return f"{visible(item.tool)}({shorten(visible(shown), MAX_ARGS_SHOWN)})"


def exit_text(code: int) -> str:
    """`exit 1`, or `killed by SIGTERM` for a negative (signal) code."""
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def failed(item: ToolCall) -> bool:
    """Whether a completed call is shown as a failure: it did not complete, or its command
    exited non-zero."""
    return item.status != "completed" or item.exit_code not in (None, 0)


def outcome(item: ToolCall, elapsed: float | None = None) -> str:
    """What follows the mark of a finished call: `exit 1 · 2.3 s`, `denied: …`. `elapsed`
    stands in for the call's own duration when it has none (it did not run)."""
    parts: list[str] = []
    if item.status == "cancelled":
        parts.append("cancelled")
    elif item.status == "failed":
        first = next((line for line in item.output.splitlines() if line.strip()), "")
        parts.append(f"failed: {shorten(visible(first), FAILURE_SHOWN)}" if first else "failed")
    elif item.exit_code is not None:
        parts.append(exit_text(item.exit_code))
    elif item.tool in CODE_TOOLS and item.status == "completed":
        found = code_found(item.output)
        if found:
            parts.append(f"→ {found}")
    sub = item.subagent
    if sub is not None and sub.model_calls:
        parts.append(f"{sub.model_calls} model call{'s' if sub.model_calls != 1 else ''}")
        parts.append(f"{sub.input_tokens + sub.output_tokens:,} tokens")
    seconds = item.duration_seconds or elapsed
    if seconds and seconds >= 0.05:
        parts.append(f"{seconds:.1f} s")
    return " · ".join(parts)


CODE_TOOLS = frozenset({"find_definition", "find_references", "symbols", "hover"})
"""The code-intelligence tools, whose line shows what they found."""


def code_found(output: str) -> str:
    """What a code-intelligence call found, in one short line: a definition's `path:line`,
    a search's count, a hover's signature (its first line that is not a code fence)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("```")]
    if not lines:
        return ""
    first = lines[0]
    if first.endswith(" is defined at:") and len(lines) > 1:
        first = lines[1].split(": ", 1)[0]
    first = first.removesuffix(":")
    return visible(first if len(first) <= 80 else first[:79] + "…")


def progress_text(report: ToolProgress) -> str:
    """A running call's progress as its tool reported it (`3/10 indexing`, `7` without a
    total), the message escaped and cut to 80 characters."""
    done = f"{report.progress:g}"
    if report.total is not None and report.total > 0:
        done = f"{done}/{report.total:g}"
    message = visible(report.message[:80])
    return f"{done} {message}" if message else done


def tool_line(item: ToolCall, elapsed: float | None = None) -> tuple[str, str, str]:
    """A finished call's line in three parts, mark, call and outcome:
    `✓ read_file(path='a')`, `✗ run_command(command='pytest') exit 1 · 2.3 s`."""
    rest = outcome(item, elapsed)
    return ("✗" if failed(item) else "✓", describe_call(item), f" {rest}" if rest else "")


def output_tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of a command's output, as a terminal showed them (a progress
    bar's redraws collapsed), escaped."""
    kept = [line.rsplit("\r", 1)[-1] for line in text.rstrip("\r\n").split("\n")]
    return [visible(line) for line in kept[-lines:] if text.strip()]


def failure_tail(item: ToolCall, streamed: str, lines: int = TAIL_LINES) -> list[str]:
    """The output lines shown under a finished command (one that failed, and one that
    succeeded as well): the last `lines` of what it streamed, or of its result (without the
    result's `exit code` header) when nothing streamed."""
    if item.exit_code is None or item.status != "completed":
        return []
    if streamed.strip():
        return output_tail(streamed, lines)
    _, _, body = item.output.partition("\n")
    return output_tail(body, lines)


def diff_lines(diff: str, limit: int = DIFF_LINES) -> list[str]:
    """An edit's diff as lines to show, escaped, at most `limit` of them and a count."""
    lines = [visible(line) for line in diff.rstrip("\n").split("\n")] if diff else []
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more diff lines"]
    return lines


def describe_subject(approval: ApprovalRequest) -> str:
    """What an approval is about (its command, else its path, else its arguments) on one
    line, escaped."""
    return visible(approval.command or approval.path or approval.arguments)


def approval_parts(approval: ApprovalRequest) -> tuple[list[str], str, list[str]]:
    """The approval prompt as (the lines before the diff, the diff, the lines after it),
    escaped (see `describe_approval`)."""
    subject = approval.command or approval.path or approval.arguments
    first, *rest = subject.split("\n")
    head = [f"tether: approval needed [{approval.id}] {visible(approval.tool)}: {visible(first)}"]
    head += [f"  │ {visible(line)}" for line in rest]
    if approval.subagent:
        head.append(f"  asked by the subagent: {visible(approval.subagent)}")
    head.append(f"  why: {visible(approval.reason)}")
    preview = visible(approval.preview, multiline=True).rstrip("\r\n")
    after = (
        [f"  always would allow: {visible(approval.always_rule)}"] if approval.always_rule else []
    )
    return head, preview, after


def describe_approval(approval: ApprovalRequest) -> str:
    """The approval prompt's lines: what, why, the diff, what "always" would allow. Every
    part is escaped; a command's further lines are shown below it, each behind a bar, so that
    none can pass for one of the prompt's own lines."""
    head, preview, after = approval_parts(approval)
    return "\n".join([*head, *([preview] if preview else []), *after]) + "\n"


def answerer_name(by: str) -> str:
    """Who answered an approval elsewhere, in a person's words: `daemon` is tether itself,
    `tether-cli` another terminal; an editor's or a library's own name is kept."""
    if by == "daemon":
        return "tether"
    if by == "tether-cli":
        return "another tether terminal"
    return by


def resolution(decision: str, by: str, message: str, *, here: bool, rule: str = "") -> str:
    """The line saying how an approval was answered (escaped): `allowed`, `denied: why` when
    answered here, `allowed by vscode` elsewhere; an "always" answer names the rule it added."""
    verb = "allowed" if decision == "allow" else "denied"
    who = "" if here else f" by {answerer_name(by)}"
    added = f" (from now on, the session allows {rule})" if rule else ""
    why = f": {message}" if message else ""
    return visible(f"  {verb}{who}{added}{why}")


def describe_summary(summary: TurnSummary) -> str:
    approx = "~" if summary.tokens_estimated else ""
    parts = [
        f"{summary.stop_reason} in {summary.duration_seconds:.1f} s",
        f"{summary.model_calls} model call{'s' if summary.model_calls != 1 else ''}",
        f"{approx}{summary.input_tokens:,} tokens in / {approx}{summary.output_tokens:,} out",
    ]
    if summary.files_changed:
        added = sum(f.added for f in summary.files_changed)
        removed = sum(f.removed for f in summary.files_changed)
        count = len(summary.files_changed)
        parts.append(f"{count} file{'s' if count != 1 else ''} changed (+{added} -{removed})")
    return " · ".join(parts)


NESTED = "  ⎿ "
"""What a subagent's line starts with, under its task call."""


def nested_prefix(description: str) -> str:
    """The start of a line about a subagent's item: `  ⎿ [its description] `, escaped."""
    return f"{NESTED}[{visible(description)}] " if description else NESTED


def first_line(text: str, limit: int = MAX_ARGS_SHOWN) -> str:
    """The first non-blank line of `text`, escaped, cut at `limit` ("…" when there is more)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = shorten(visible(lines[0].strip()), limit)
    return line if len(lines) == 1 or line.endswith("…") else f"{line}…"
