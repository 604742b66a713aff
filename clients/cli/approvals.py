"""How a followed turn's approvals are answered.

On a terminal each is asked, one at a time, in the order they came (one that waited behind
another is described again when its turn comes). The question says what "always" would
allow, offers it only when the daemon gave a rule for it, and says that Enter means no. One
key answers it, as in the interactive mode: y, a, n, or Enter for the default; any other key
asks again, and end of input is a no. A key typed before the question was shown answers
nothing.

Without a terminal each is denied at once, or, given a wait (`tether run --approval-timeout`),
left for another client: the commands that answer it are printed, and once the wait is over
it is denied unless another controller is attached to the session, which may still answer.

Another client may answer first; its answer wins and the question is withdrawn.

An approval that waits for a person (asked here, or left for another client) rings the
terminal's bell once, where the caller gives a bell (`ring_bell`: a terminal, no `--quiet`).
"""

import os
import queue
import select
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol, TextIO

try:
    import termios
except ImportError:  # no terminals: answers come as lines
    termios = None

from tether.clients.cli.render import describe_approval, visible
from tether.clients.core.rpc import CallError, Client
from tether.clients.core.text import answerer_name
from tether.protocol.errors import ErrorCode
from tether.protocol.events import ApprovalRequest, Decision, DecisionScope
from tether.protocol.methods import APPROVAL_LIST, APPROVAL_RESPOND, ApprovalRespondParams

ANSWER_POLL_S = 0.1
"""How often the terminal's answer is looked for while a question is on it."""
RECHECK_S = 1.0
"""How often, once the wait is over, a client answering from elsewhere is looked for again."""

NO_TERMINAL = (
    "tether run had no terminal to ask on; to let another client answer, give"
    " --approval-timeout SECONDS, or choose a --permission-mode"
)


def question(approval: ApprovalRequest) -> str:
    """The question asked on the terminal for `approval` (escaped)."""
    if approval.always_rule:
        return f"allow? [y]es / [a]lways {visible(approval.always_rule)} / [N]o (Enter = no): "
    return "allow? [y]es / [N]o (Enter = no): "


def answer_commands(session_id: str, approval_id: str) -> str:
    return (
        f"`tether approve {session_id} {approval_id}` or `tether deny {session_id} {approval_id}`"
    )


class AnswerPrompt(Protocol):
    """Where an approval question is put to a person and their answer line comes back."""

    def ask(self, prompt: str) -> None:
        """Put the question; the answer comes later from `answer`."""
        ...

    def withdraw(self, note: str) -> None:
        """The question was answered elsewhere: take it back, saying `note` (a line already
        typed for it answers nothing)."""
        ...

    def answer(self) -> str | None:
        """The person's answer line, once (None while there is none)."""
        ...


class TerminalPrompt:
    """Asks on the terminal; one key answers (`Enter` is the default the question shows).

    While a question is on, the terminal is in cbreak mode (keys come one by one and are not
    echoed; Ctrl-C still interrupts) and keys typed before it was shown are thrown away, so
    that only a key pressed for this question answers it. The key is looked for without
    blocking, so events keep flowing (and another client's answer can win) while the person
    decides. When stdin is no terminal, a line answers instead (read on a thread).
    """

    def __init__(
        self,
        stdin: TextIO | None = None,
        stderr: TextIO | None = None,
        show: Callable[[str | None], None] | None = None,
    ) -> None:
        """`show`: puts a question on the terminal, or with None says it is off (see
        `Renderer.question`); default: written to `stderr`."""
        self._stdin = stdin or sys.stdin
        self._stderr = stderr or sys.stderr
        self._show = show or self._write_question
        self._keys = KeyReader.of(self._stdin)
        self._lines: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._asked = 0
        self._open = 0
        """The number of the question on the terminal; 0 when none is."""
        self._reader: threading.Thread | None = None
        self._ended = False

    def _write_question(self, text: str | None) -> None:
        if text is not None:
            self._stderr.write(text)
            self._stderr.flush()

    def ask(self, prompt: str) -> None:
        with self._lock:
            self._asked += 1
            self._open = self._asked
        if self._keys is not None:
            self._keys.start()
        self._show(prompt)
        if self._keys is None and self._reader is None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def withdraw(self, note: str) -> None:
        """Take the question off the terminal: a key or line typed for it answers nothing."""
        with self._lock:
            self._open = 0
        if self._keys is not None:
            self._keys.stop()
        self._stderr.write("\n")
        self._show(None)
        self._stderr.write(f"{note}\n")
        self._stderr.flush()

    def close(self) -> None:
        """Put the terminal back as it was (the follow is over)."""
        if self._keys is not None:
            self._keys.stop()

    def _read(self) -> None:
        while True:
            line = self._stdin.readline()
            with self._lock:
                self._lines.put((self._open, line))
            if not line:
                return

    def answer(self) -> str | None:
        """The key (or line) typed for the question on the terminal ("" for Enter and at end
        of input), or None while there is none."""
        if self._keys is not None:
            return self._answer_key(self._keys)
        while True:
            with self._lock:
                current = self._open
                if current and self._ended:
                    self._open = 0
                    return ""
                try:
                    asked, line = self._lines.get_nowait()
                except queue.Empty:
                    return None
                if not line:
                    self._ended = True
                    continue
                if current and asked == current:
                    self._open = 0
                    return line

    def _answer_key(self, keys: "KeyReader") -> str | None:
        if not self._open:
            return None
        key = keys.key()
        if key is None:
            return None
        self._open = 0
        keys.stop()
        answer = "" if key in ("\r", "\n", "\x04", "") else key
        shown = answer if answer.isprintable() else ""
        self._stderr.write(f"{shown}\n")
        self._stderr.flush()
        self._show(None)
        return answer


class KeyReader:
    """One key at a time from a terminal, without waiting: `start` puts it in cbreak mode
    (and throws typed-ahead input away), `stop` puts it back."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._saved: list[Any] | None = None

    @staticmethod
    def of(stream: TextIO) -> "KeyReader | None":
        """A reader for `stream` when it is a terminal, else None."""
        if termios is None:
            return None
        try:
            fd = stream.fileno()
        except (OSError, ValueError):  # in memory, or closed
            return None
        return KeyReader(fd) if os.isatty(fd) else None

    def start(self) -> None:
        assert termios is not None
        try:
            if self._saved is None:
                self._saved = termios.tcgetattr(self._fd)
                mode = termios.tcgetattr(self._fd)
                mode[3] &= ~(termios.ICANON | termios.ECHO)
                mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
                termios.tcsetattr(self._fd, termios.TCSANOW, mode)
            termios.tcflush(self._fd, termios.TCIFLUSH)
        except termios.error:  # the terminal went away: end of input answers
            pass

    def stop(self) -> None:
        assert termios is not None
        saved, self._saved = self._saved, None
        if saved is not None:
            with suppress(termios.error):
                # Only the modes `start` changed: NOFLSH may have been set meanwhile.
                mode = termios.tcgetattr(self._fd)
                keep = termios.ICANON | termios.ECHO
                mode[3] = (mode[3] & ~keep) | (saved[3] & keep)
                mode[6][termios.VMIN], mode[6][termios.VTIME] = (
                    saved[6][termios.VMIN],
                    saved[6][termios.VTIME],
                )
                termios.tcsetattr(self._fd, termios.TCSANOW, mode)

    def key(self) -> str | None:
        """The next key pressed ("" at end of input), None while none was."""
        try:
            ready, _, _ = select.select([self._fd], [], [], 0)
            if not ready:
                return None
            data = os.read(self._fd, 64)
        except OSError:
            return ""
        # An escape sequence or a multi-byte character is one key; only its first counts.
        return data.decode("utf-8", "replace")[:1]


class ApprovalAnswerer:
    """Answers one session's approval requests as they arrive: on a `TerminalPrompt` when
    `interactive`, otherwise by denying them, at once or after `wait_seconds` (see the
    module's rules); not at all when `enabled` is false (another client answers: the commands
    that do are printed)."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        *,
        interactive: bool,
        enabled: bool = True,
        wait_seconds: float = 0.0,
        prompt: AnswerPrompt | None = None,
        say: Callable[[str], None] | None = None,
        bell: Callable[[], None] | None = None,
    ) -> None:
        """`prompt`: where to ask when `interactive` (default: a `TerminalPrompt`). `say`:
        where the answerer's own lines go (an approval described, what to answer it with), one
        or more lines without the final newline (default: stderr); a host that draws the
        terminal itself passes its own output. `bell`: rung once for each approval that
        waits for a person (None: silence)."""
        self._bell = bell
        self.client = client
        self.session_id = session_id
        self.enabled = enabled
        self.wait_seconds = wait_seconds
        self._prompt = (prompt or TerminalPrompt()) if interactive else None
        self._asking: ApprovalRequest | None = None
        self._queue: list[ApprovalRequest] = []
        self._requested: dict[str, ApprovalRequest] = {}
        self._resolved: set[str] = set()
        self._deadlines: dict[str, tuple[ApprovalRequest, float]] = {}
        """Approvals left for another client, with when to look again."""
        self._told_attached: set[str] = set()
        self._write = say or _to_stderr
        self.answered: set[str] = set()
        """The approvals this answerer answered (denied without a terminal included)."""

    def close(self) -> None:
        """The follow is over: put the terminal back as the question found it."""
        if isinstance(self._prompt, TerminalPrompt):
            self._prompt.close()

    @property
    def asking(self) -> ApprovalRequest | None:
        """The approval whose question is on the terminal."""
        return self._asking

    @property
    def waiting(self) -> bool:
        """A question is on the terminal or an approval is left for another client: the caller
        should `poll` within `poll_within()`."""
        return self._asking is not None or bool(self._deadlines)

    def poll_within(self) -> float | None:
        """How long the caller may wait for an event before calling `poll` (None: forever)."""
        if self._asking is not None:
            return ANSWER_POLL_S
        if self._deadlines:
            soonest = min(deadline for _, deadline in self._deadlines.values())
            return max(soonest - time.monotonic(), 0.0)
        return None

    def outstanding(self) -> set[str]:
        """The ids of the approvals requested and not yet resolved."""
        return {a.id for a in self.pending()}

    def pending(self) -> list[ApprovalRequest]:
        """The approvals requested and not yet resolved, oldest first."""
        return sorted(
            [a for a in self._requested.values() if a.id not in self._resolved],
            key=lambda a: a.requested_at,
        )

    def requested(self, approval: ApprovalRequest, *, describe: bool = False) -> None:
        """`approval` waits for an answer. `describe`: it has not been described on the
        terminal yet (it was pending when the client attached). One requested before is
        ignored."""
        if approval.id in self._requested:
            return
        self._requested[approval.id] = approval
        if describe:
            self._write(describe_approval(approval).rstrip("\n"))
        if self._bell is not None and (
            not self.enabled or self._prompt is not None or self.wait_seconds > 0
        ):
            self._bell()
        if not self.enabled:
            self._say(f"answer it with {answer_commands(self.session_id, approval.id)}")
            return
        if self._prompt is not None:
            if self._asking is None:
                self._ask(approval, describe=False)
            else:
                self._queue.append(approval)
            return
        if self.wait_seconds > 0:
            self._deadlines[approval.id] = (approval, time.monotonic() + self.wait_seconds)
            self._say(
                f"waiting up to {self.wait_seconds:g} s for another client to answer:"
                f" {answer_commands(self.session_id, approval.id)}"
            )
            return
        self._respond(approval, "deny", "once", NO_TERMINAL)

    def resolved(self, approval_id: str, by: str = "") -> None:
        """The approval was answered (here or elsewhere, by the client named `by`): forget it,
        and when it is the one on the terminal, withdraw the question and ask the next."""
        self._resolved.add(approval_id)
        self._queue = [a for a in self._queue if a.id != approval_id]
        self._deadlines.pop(approval_id, None)
        if self._asking is None or self._asking.id != approval_id:
            return
        self._asking = None
        if self._prompt is not None:
            elsewhere = f"by {answerer_name(by)}" if by else "elsewhere"
            self._prompt.withdraw(f"(answered {visible(elsewhere)})")
        self._ask_next()

    def poll(self) -> None:
        """Send the terminal's answer if the person has given one, and deny what was left for
        another client past its wait."""
        self._poll_terminal()
        self._poll_deadlines()

    def _ask(self, approval: ApprovalRequest, *, describe: bool) -> None:
        assert self._prompt is not None
        self._asking = approval
        if describe:
            self._write(describe_approval(approval).rstrip("\n"))
        self._prompt.ask(question(approval))

    def _ask_next(self) -> None:
        if self._queue:
            self._ask(self._queue.pop(0), describe=True)

    def _poll_terminal(self) -> None:
        if self._prompt is None or self._asking is None:
            return
        line = self._prompt.answer()
        if line is None:
            return
        approval = self._asking
        choice = line.strip().lower()
        if choice in ("a", "always") and approval.always_rule:
            self._respond(approval, "allow", "always")
        elif choice in ("y", "yes"):
            self._respond(approval, "allow", "once")
        elif choice in ("", "n", "no"):
            self._respond(approval, "deny", "once", "denied at the terminal")
        else:
            options = "y, a or n" if approval.always_rule else "y or n"
            self._prompt.ask(f"answer {options} (Enter = no): ")
            return
        self._asking = None
        self._ask_next()

    def _poll_deadlines(self) -> None:
        now = time.monotonic()
        due = [approval for approval, deadline in self._deadlines.values() if deadline <= now]
        if not due:
            return
        listed = {p.approval.id: p for p in self.client.call(APPROVAL_LIST).approvals}
        for approval in due:
            pending = listed.get(approval.id)
            if pending is None:  # answered meanwhile: its resolution is on its way
                del self._deadlines[approval.id]
            elif pending.other_controllers:
                self._deadlines[approval.id] = (approval, now + RECHECK_S)
                if approval.id not in self._told_attached:
                    self._told_attached.add(approval.id)
                    self._say("another client is attached to the session; waiting for its answer")
            else:
                del self._deadlines[approval.id]
                self._respond(
                    approval,
                    "deny",
                    "once",
                    f"nobody answered within {self.wait_seconds:g} s (tether run had no"
                    " terminal to ask on)",
                )

    def _say(self, line: str) -> None:
        self._write(f"tether: {line}")

    def _respond(
        self, approval: ApprovalRequest, decision: Decision, scope: DecisionScope, message: str = ""
    ) -> None:
        self.answered.add(approval.id)
        try:
            self.client.call(
                APPROVAL_RESPOND,
                ApprovalRespondParams(
                    session_id=self.session_id,
                    approval_id=approval.id,
                    decision=decision,
                    scope=scope,
                    message=message,
                ),
            )
        except CallError as exc:
            # Answered elsewhere first, or its turn ended: the resolution says so.
            if exc.code not in (ErrorCode.APPROVAL_RESOLVED, ErrorCode.APPROVAL_NOT_FOUND):
                raise


def ring_bell(stream: TextIO | None = None) -> Callable[[], None] | None:
    """A bell that writes BEL to `stream` (default: stderr), or None when `stream` is no
    terminal (a BEL in a file or a pipe would only be noise)."""
    out = stream or sys.stderr
    try:
        if not out.isatty():
            return None
    except ValueError:  # closed
        return None

    def ring() -> None:
        out.write("\a")
        out.flush()

    return ring


def _to_stderr(text: str) -> None:
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()
