"""Following one turn of a session: attach as its controller, render its events until it
completes, and answer its approvals (`ApprovalAnswerer`), those already pending when it
attached included.

What Ctrl-C does is the caller's choice (`follow(..., on_interrupt=)`):

- `cancel` (`tether run`): cancel the turn and follow it to its end; a second Ctrl-C leaves at
  once. On a terminal the first says so; without one it just cancels.
- `detach` (`tether attach`): leave the turn running and say how to stop it (`Detached`); a
  second Ctrl-C within `detach_window()` (`DETACH_WINDOW_S` unless `TETHER_DETACH_WINDOW`
  says otherwise) cancels the turn instead, which is then followed to its end.

A re-attach after a resync that brings a snapshot (the daemon lost the events in between)
takes the turn's end and the pending approvals from that snapshot.

While it waits for events it lets the renderer's clock run (`Renderer.tick`). On a terminal,
a Ctrl-C throws away none of what was written (`output_kept_on_interrupt`).
"""

import os
import time
from collections.abc import Mapping
from typing import Literal

from tether.clients.cli.approvals import (
    ApprovalAnswerer,
    TerminalPrompt,
    answer_commands,
    ring_bell,
)
from tether.clients.cli.ctrl_c import HeldCtrlC
from tether.clients.cli.keep_output import output_kept_on_interrupt
from tether.clients.cli.render import Renderer, visible
from tether.clients.core.rpc import CallError, Client
from tether.protocol.errors import ErrorCode
from tether.protocol.events import (
    ApprovalRequested,
    ApprovalResolved,
    TurnCompleted,
    TurnError,
    TurnStatus,
)
from tether.protocol.methods import (
    SESSION_ATTACH,
    TURN_CANCEL,
    DaemonEventParams,
    SessionAttachParams,
    SessionAttachResult,
    SessionEventParams,
    TurnCancelParams,
)
from tether.protocol.session import Cursor

TICK_S = 0.1
"""How often the renderer's clock ticks while something on screen moves."""

DETACH_WINDOW_S = 2.0
"""After a Ctrl-C that detaches, how long a second one still cancels the turn."""


def detach_window(environ: Mapping[str, str] | None = None) -> float:
    """The seconds a second Ctrl-C still cancels after one that detached: `TETHER_DETACH_WINDOW`
    when it holds a number of seconds from 0 to 60 (the test suite's way to not wait out the
    whole window), else `DETACH_WINDOW_S`."""
    env = os.environ if environ is None else environ
    try:
        seconds = float(env.get("TETHER_DETACH_WINDOW", ""))
    except ValueError:
        return DETACH_WINDOW_S
    return seconds if 0 <= seconds <= 60 else DETACH_WINDOW_S


OnInterrupt = Literal["cancel", "detach"]


class Detached(Exception):
    """The person left with Ctrl-C; the turn goes on in the daemon."""


class Follower:
    """Follows one turn's events until it completes, re-attaching after a resync, and
    answers the turn's approvals (see `ApprovalAnswerer`; `approval_timeout` is its wait
    without a terminal)."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        renderer: Renderer,
        *,
        interactive: bool = False,
        answer_approvals: bool = True,
        approval_timeout: float = 0.0,
        bell: bool = False,
    ) -> None:
        """`bell`: ring the terminal's bell (on stderr, when it is one) for each approval that
        waits for a person."""
        self.client = client
        self.session_id = session_id
        self.renderer = renderer
        self.interactive = interactive
        self.cursor = Cursor(seq=0)
        self.approvals = ApprovalAnswerer(
            client,
            session_id,
            interactive=interactive,
            enabled=answer_approvals,
            wait_seconds=approval_timeout,
            prompt=TerminalPrompt(show=renderer.question) if interactive else None,
            say=renderer.note,
            bell=ring_bell() if bell else None,
        )
        renderer.answered_here = self.approvals.answered
        self.error: TurnError | None = None
        """Why the followed turn failed, once it has."""
        self._attached: SessionAttachResult | None = None
        """The last attach's result, until `follow` has taken what it needs from it."""
        self._cancelling = False

    def attach(self, after: Cursor | None = None) -> SessionAttachResult:
        result = self.client.call(
            SESSION_ATTACH,
            SessionAttachParams(session_id=self.session_id, after=after, role="controller"),
        )
        self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
        self._attached = result
        return result

    def follow(
        self, turn_id: str, *, on_interrupt: OnInterrupt = "cancel", held: HeldCtrlC | None = None
    ) -> TurnStatus:
        """The status turn `turn_id` ended with; `attach` first. Raises `Detached` when the
        person leaves it running (`on_interrupt="detach"`), KeyboardInterrupt on a second
        Ctrl-C after a cancel. A Ctrl-C `held` until now counts as one pressed at once."""
        with output_kept_on_interrupt():
            try:
                while True:
                    # Ctrl-C may come anywhere in a step, not only while waiting for the daemon.
                    try:
                        if held is not None and held.release():
                            held = None
                            raise KeyboardInterrupt
                        held = None
                        status = self._step(turn_id)
                    except KeyboardInterrupt:
                        self._interrupted(turn_id, on_interrupt)
                        continue
                    if status is not None:
                        return status
            finally:
                self.approvals.close()

    def _step(self, turn_id: str) -> TurnStatus | None:
        """Take one notification (or the answer to a question): the turn's status once it
        has ended, else None."""
        ended = self._take_attach(turn_id)
        if ended is not None:
            return ended
        self.approvals.poll()
        self.renderer.tick()
        timeout = self.approvals.poll_within()
        if self.renderer.wants_ticks:
            timeout = TICK_S if timeout is None else min(timeout, TICK_S)
        try:
            method, params = self.client.next_notification(timeout=timeout)
        except TimeoutError:
            return None
        if method == "session/resync":
            self.attach(self.cursor)
            return None
        if isinstance(params, DaemonEventParams):
            self.renderer.say(visible(params.message))
            return None
        if not isinstance(params, SessionEventParams) or params.session_id != self.session_id:
            return None
        self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
        event_turn = getattr(params.event, "turn_id", None)
        if event_turn is not None and event_turn != turn_id:
            return None  # another turn's events; session-wide ones (renames) still show
        self.renderer.event(params)
        match params.event:
            case ApprovalRequested(approval=approval) if approval.turn_id == turn_id:
                self.approvals.requested(approval)
            case ApprovalResolved(approval_id=approval_id, by=by):
                self.approvals.resolved(approval_id, by)
            case TurnCompleted(status=status, error=error):
                self.error = error
                return status
            case _:
                pass
        return None

    def _take_attach(self, turn_id: str) -> TurnStatus | None:
        """Take the turn's state from the last attach's snapshot, if it brought one: the
        status it ended with, or None while it runs (its pending approvals are then asked)."""
        result, self._attached = self._attached, None
        if result is None or result.snapshot is None:
            return None
        snapshot = result.snapshot
        for turn in snapshot.turns:
            if turn.id == turn_id and turn.status != "running":
                self.error = turn.error
                return turn.status
        pending = [a for a in snapshot.pending_approvals if a.turn_id == turn_id]
        for approval_id in self.approvals.outstanding() - {a.id for a in pending}:
            self.approvals.resolved(approval_id)
        for approval in pending:
            # Described by the renderer, which hides what it draws live while it is asked.
            self.renderer.pending_approval(approval)
            self.approvals.requested(approval)
        return None

    def _interrupted(self, turn_id: str, on_interrupt: OnInterrupt) -> None:
        """Ctrl-C: cancel the turn, or detach (raising `Detached`), as `follow` says."""
        self.renderer.end_question()
        if self._cancelling:
            raise KeyboardInterrupt
        if on_interrupt == "detach":
            self._detach(turn_id)
        elif self.interactive:
            self.renderer.say("cancelling (Ctrl-C again to leave it)", "warning")
        else:
            self.renderer.say(f"interrupted: cancelling turn {turn_id}", "warning")
        self._cancel(turn_id)

    def _detach(self, turn_id: str) -> None:
        """Say that the turn goes on and how to stop it; return (to cancel it) only when a
        second Ctrl-C comes within `detach_window()`, else raise `Detached`."""
        window = detach_window()
        lines = [
            f"detached; the turn goes on — `tether cancel {self.session_id}` stops it"
            f" (Ctrl-C again within {window:g} s cancels it now)"
        ]
        lines += [
            f"approval {approval.id} waits: {answer_commands(self.session_id, approval.id)}"
            for approval in self.approvals.pending()
        ]
        try:
            for line in lines:
                self.renderer.say(line)
            time.sleep(window)
        except KeyboardInterrupt:
            self.renderer.say(f"cancelling turn {turn_id}", "warning")
            return
        raise Detached

    def _cancel(self, turn_id: str) -> None:
        self._cancelling = True
        try:
            self.client.call(
                TURN_CANCEL, TurnCancelParams(session_id=self.session_id, turn_id=turn_id)
            )
        except CallError as exc:
            if exc.code != ErrorCode.NO_RUNNING_TURN:  # it ended meanwhile: its end is on its way
                raise
