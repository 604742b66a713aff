"""The interactive prompt as drawn: above the input, the renderer's unfinished line and what
is under way (or the approval question in the input's place); below it, the status line (or
the hint that a second Ctrl-C leaves). The input keeps a history per workspace and completes
slash commands, their arguments and `@path` mentions."""

import time
from pathlib import Path
from typing import Protocol

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.history import FileHistory
from prompt_toolkit.utils import get_cwidth

from tether.clients.cli.interactive.completion import ChatCompleter, WorkspaceFiles
from tether.clients.cli.interactive.keys import KeyHost, key_bindings
from tether.clients.cli.interactive.output import TerminalLines
from tether.clients.cli.render import Renderer, visible
from tether.clients.core.places import history_path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
DIM, BOLD, RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"


class PromptHost(KeyHost, Protocol):
    """What the prompt shows and completes from (the interactive session)."""

    workspace: Path
    lines: TerminalLines
    renderer: Renderer

    def arguments(self, command: str) -> list[str]: ...

    def terminal_size(self) -> tuple[int, int]: ...


def make_prompt(chat: PromptHost) -> PromptSession[str]:
    history = history_path(chat.workspace)
    history.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    completer = ChatCompleter(WorkspaceFiles(chat.workspace), chat.arguments)
    session: PromptSession[str] = PromptSession(
        message=lambda: message(chat),
        multiline=True,
        prompt_continuation="  ",
        history=FileHistory(str(history)),
        completer=completer,
        complete_while_typing=True,
        bottom_toolbar=lambda: toolbar(chat),
        key_bindings=key_bindings(chat),
        erase_when_done=True,
    )

    def typed(_buffer: object) -> None:
        chat.ctrl_c.forget()

    session.default_buffer.on_text_changed += typed
    # Esc alone must not wait long to be told from Alt-Enter (which arrives in one read).
    session.app.ttimeoutlen = 0.05
    session.app.timeoutlen = 0.2
    return session


def message(chat: PromptHost) -> ANSI:
    parts: list[str] = []
    if chat.lines.tail:
        parts.append(chat.lines.tail + "\n")
    under_way = working(chat)
    if under_way is not None:
        parts.append(f"{DIM}{under_way}{RESET}\n")
    if chat.question.question is not None:
        parts.append(f"{BOLD}{chat.question.question}{RESET}")
    else:
        parts.append(f"{BOLD}›{RESET} ")  # noqa: RUF001
    return ANSI("".join(parts))


def working(chat: PromptHost) -> str | None:
    """The line above the prompt while a turn runs: what is under way (the renderer's
    `activity`), else how long the turn has run; cut to the terminal's width."""
    now = time.monotonic()
    shown = chat.renderer.activity(now)
    started = chat.state.turn_started_at
    if shown is None and chat.state.running_turn is not None and started is not None:
        frame = SPINNER[int((now - started) * 10) % len(SPINNER)]
        shown = f"{frame} working · {now - started:.0f} s"
    if shown is None:
        return None
    if chat.state.running_turn is not None:
        shown += " · Esc cancels"
    return cut(shown, chat.terminal_size()[0] - 1)


def toolbar(chat: PromptHost) -> str:
    if chat.ctrl_c.hint_drawn():
        return " Ctrl-C again to leave "
    return f" {visible(chat.state.status_line())} "


def cut(text: str, width: int) -> str:
    """`text` cut to `width` terminal cells, an ellipsis at the cut."""
    if get_cwidth(text) <= width:
        return text
    kept: list[str] = []
    used = 1
    for ch in text:
        used += get_cwidth(ch)
        if used > width:
            break
        kept.append(ch)
    return "".join(kept) + "…"
