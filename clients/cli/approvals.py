"""How a followed turn's approvals are answered: asked on the terminal when there is one,
otherwise denied with a message saying why. Another client may answer first; its answer wins
and the terminal's line is then ignored."""

import queue
import sys
import threading
from typing import Protocol

from tether.clients.rpc import CallError, Client
from tether.protocol.errors import ErrorCode
from tether.protocol.events import ApprovalRequest, Decision, DecisionScope
from tether.protocol.methods import APPROVAL_RESPOND, ApprovalRespondParams


class AnswerPrompt(Protocol):
    """Where an approval question is put to a person and their answer line comes back."""

    def ask(self, prompt: str) -> None:
        """Put the question; the answer comes later from `answer`."""
        ...

    def discard(self) -> None:
        """The question was answered elsewhere: drop it (an answer already given is ignored)."""
        ...

    def answer(self) -> str | None:
        """The person's answer line, once (None while there is none)."""
        ...


class TerminalPrompt:
    """Reads one answer line from the terminal on a thread, so that events keep flowing (and
    another client's answer can win) while the person decides."""

    def __init__(self) -> None:
        self._answers: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reading = False
        self._discard = 0

    def ask(self, prompt: str) -> None:
        sys.stderr.write(prompt)
        sys.stderr.flush()
        if not self._reading:
            self._reading = True
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        line = sys.stdin.readline()
        self._answers.put(line or "n")
        self._reading = False

    def discard(self) -> None:
        sys.stderr.write("(answered elsewhere)\n")
        self._discard += 1

    def answer(self) -> str | None:
        while True:
            try:
                line = self._answers.get_nowait()
            except queue.Empty:
                return None
            if self._discard:
                self._discard -= 1
                continue
            return line


QUESTION = "allow? [y]es / [a]lways / [n]o: "


class ApprovalAnswerer:
    """Answers one session's approval requests as they arrive: on a `TerminalPrompt` when
    `interactive`, otherwise by denying them; not at all when `enabled` is false (another
    client answers). At most one question is on the terminal at a time."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        *,
        interactive: bool,
        enabled: bool = True,
        prompt: AnswerPrompt | None = None,
    ) -> None:
        """`prompt`: where to ask when `interactive` (default: a `TerminalPrompt`)."""
        self.client = client
        self.session_id = session_id
        self.enabled = enabled
        self._prompt = (prompt or TerminalPrompt()) if interactive else None
        self._asking: ApprovalRequest | None = None

    @property
    def asking(self) -> ApprovalRequest | None:
        """The approval whose question is on the terminal."""
        return self._asking

    @property
    def waiting(self) -> bool:
        """A question is on the terminal: the caller should `poll` while it waits for events."""
        return self._asking is not None

    def requested(self, approval: ApprovalRequest) -> None:
        if not self.enabled:
            return
        if self._prompt is None:
            self._respond(
                approval,
                "deny",
                "once",
                "tether run has no terminal to ask on; approve from another terminal with "
                "`tether approve`, or choose a --permission-mode",
            )
            return
        self._asking = approval
        self._prompt.ask(QUESTION)

    def resolved(self, approval_id: str) -> None:
        """The approval was answered; when it is the one being asked, drop the question."""
        if self._asking is None or self._asking.id != approval_id:
            return
        self._asking = None  # answered elsewhere; the prompt's line is ignored
        if self._prompt is not None:
            self._prompt.discard()

    def poll(self) -> None:
        """Send the terminal's answer, if the person has given one."""
        if self._prompt is None or self._asking is None:
            return
        answer = self._prompt.answer()
        if answer is None:
            return
        approval, self._asking = self._asking, None
        choice = answer.strip().lower()[:1]
        if choice == "a":
            self._respond(approval, "allow", "always")
        elif choice == "y":
            self._respond(approval, "allow", "once")
        else:
            self._respond(approval, "deny", "once", "denied at the terminal")

    def _respond(
        self, approval: ApprovalRequest, decision: Decision, scope: DecisionScope, message: str = ""
    ) -> None:
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
            if exc.code != ErrorCode.APPROVAL_RESOLVED:
                raise
