"""One tether session as the editor sees it (`AcpSession`), over the connection to its
workspace's daemon (`Link`).

Threads (`peer` runs each editor request on its own): one connection per workspace
(`SharedClient`), whose pump thread hands each session's events to its `AcpSession` in order.
An `AcpSession` turns them into updates under its lock, which a request holds while it asks
the daemon something whose answer decides how later events read (the user message a prompt
sends, the snapshot a load replays): the pump waits for it, so no event is read half-known.

Approvals: each `approval_requested` becomes a `session/request_permission`; the editor's
choice is sent as `approval/respond`. An approval resolved otherwise (another client, or the
daemon for a cancelled turn) withdraws the editor's request with `$/cancel_request`; the
editor answers it `cancelled`, and that answer is not passed on.
"""

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tether.clients.acp import params as p
from tether.clients.acp.peer import INTERNAL_ERROR, Abandoned, AcpError, Peer, Pending
from tether.clients.acp.prompt import turn_params
from tether.clients.acp.updates import JSON, Translator, permission_tool_call
from tether.clients.core.call_error import CallError
from tether.clients.core.channel import SharedClient
from tether.clients.core.websocket import WebSocketError
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TurnCompleted,
)
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    IMAGE_READ,
    SESSION_ATTACH,
    SESSION_DETACH,
    TURN_CANCEL,
    TURN_START,
    ApprovalRespondParams,
    ImageReadParams,
    SessionAttachParams,
    SessionEventParams,
    SessionRef,
    TurnCancelParams,
)
from tether.protocol.session import Cursor

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE = "allow-once", "allow-always", "reject-once"

LOST = "lost the connection to the tether daemon"


def log(message: str) -> None:
    print(f"tether acp: {message}", file=sys.stderr, flush=True)


class Host(Protocol):
    """What a session asks of the editor connection it is open in (`agent.Agent`)."""

    peer: Peer

    def call(self, method: Callable[..., Any], *args: Any) -> Any: ...

    def spawn(self, work: Callable[[], None]) -> None: ...


class Link:
    """The connection to one workspace's daemon, shared by that workspace's sessions."""

    def __init__(
        self,
        workspace: Path,
        client: SharedClient,
        route: Callable[["Link", str, object], None],
    ) -> None:
        self.workspace = workspace
        self.client = client
        self.alive = True
        self._route = route
        self._pump = threading.Thread(target=self._read, name="acp-pump", daemon=True)
        self._pump.start()

    def _read(self) -> None:
        try:
            while True:
                method, params = self.client.next_notification()
                self._route(self, method, params)
        except (WebSocketError, OSError) as exc:
            log(f"{LOST} for {self.workspace}: {exc}")
        finally:
            self.alive = False
            self._route(self, "", None)

    def call_quietly(self, what: Callable[[], object]) -> None:
        """Run a call whose failure changes nothing for the editor (a cancel that finds
        the turn over, an answer that comes second)."""
        try:
            what()
        except (CallError, WebSocketError, OSError) as exc:
            log(f"ignored: {exc}")


class TurnWait:
    """A `session/prompt` waiting for its turn to end."""

    def __init__(self) -> None:
        self.turn_id = ""
        self.cancelled = False
        self.ended = threading.Event()
        self.end: TurnCompleted | None = None
        """None once ended: the connection was lost."""


class AcpSession:
    """One tether session as this editor sees it."""

    def __init__(self, agent: Host, session_id: str, link: Link) -> None:
        self.agent = agent
        self.id = session_id
        self.link = link
        self.lock = threading.Lock()
        self.translator = Translator(link.workspace, self._image)
        self.cursor: Cursor | None = None
        self.prompts: list[TurnWait] = []
        self.permissions: dict[str, Pending] = {}
        """The editor's open permission requests, by approval id."""

    # --- from the daemon (the pump thread) --------------------------------------------------

    def on_event(self, params: SessionEventParams) -> None:
        with self.lock:
            cursor = self.cursor
            if cursor is None or (cursor.epoch == params.epoch and params.seq <= cursor.seq):
                return  # not attached yet, or already in the snapshot
            self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
            event = params.event
            self._send(self.translator.event(event))
            match event:
                case ApprovalRequested(approval=approval):
                    self._ask(approval)
                case ApprovalResolved(approval_id=approval_id, by=by):
                    waiter = self.permissions.pop(approval_id, None)
                    if waiter is not None:
                        self.agent.peer.abandon(waiter, f"answered by {by}")
                case TurnCompleted(turn_id=turn_id):
                    for wait in [w for w in self.prompts if w.turn_id == turn_id]:
                        self.prompts.remove(wait)
                        wait.end = event
                        wait.ended.set()
                case _:
                    pass

    def lost(self) -> None:
        with self.lock:
            prompts, self.prompts = self.prompts, []
            permissions, self.permissions = self.permissions, {}
        for wait in prompts:
            wait.ended.set()
        for waiter in permissions.values():
            self.agent.peer.abandon(waiter, LOST)

    def _image(self, sha256: str) -> bytes | None:
        """The bytes of one of the session's images, from the daemon (a tool's, to show)."""
        try:
            return self.link.client.call(
                IMAGE_READ, ImageReadParams(session_id=self.id, sha256=sha256)
            ).data
        except (CallError, WebSocketError, OSError) as exc:
            log(f"image {sha256} of session {self.id} is not shown: {exc}")
            return None

    def _send(self, updates: list[JSON]) -> None:
        for update in updates:
            self.agent.peer.notify("session/update", {"sessionId": self.id, "update": update})

    # --- opening ----------------------------------------------------------------------------

    def attach(self, *, replay: bool) -> None:
        """Attach (again) from a snapshot; with `replay`, send the editor the whole session."""
        with self.lock:
            result = self.agent.call(
                self.link.client.call, SESSION_ATTACH, SessionAttachParams(session_id=self.id)
            )
            snapshot = result.snapshot
            assert snapshot is not None  # attaching without a cursor answers with one
            self.translator = Translator(self.link.workspace, self._image)
            self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
            if replay:
                self._send(self.translator.snapshot(snapshot))
            else:
                self.translator.resume(snapshot)
            for approval in snapshot.pending_approvals:
                self._ask(approval)

    def resync(self) -> None:
        """Catch up after the daemon dropped this connection's subscription."""
        with self.lock:
            cursor = self.cursor
            result = self.link.client.call(
                SESSION_ATTACH, SessionAttachParams(session_id=self.id, after=cursor)
            )
            self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
            if result.snapshot is not None:
                # The missed events are gone: carry on from the state as it is now.
                log(f"session {self.id}: events were missed; the editor may show gaps")
                self.translator.resume(result.snapshot)

    # --- prompts ----------------------------------------------------------------------------

    def prompt(self, request: p.Prompt) -> JSON:
        turn = turn_params(self.id, request.prompt)
        wait = TurnWait()
        with self.lock:
            self.prompts.append(wait)  # a cancel from now on marks it
            try:
                started = self.agent.call(self.link.client.call, TURN_START, turn)
            except AcpError:
                self.prompts.remove(wait)
                raise
            self.translator.skip_inputs.add(started.input_id)
            wait.turn_id = started.turn_id
        if wait.cancelled:  # cancelled while turn/start was on its way
            self._cancel_turn(started.turn_id)
        wait.ended.wait()
        if wait.cancelled:
            return {"stopReason": "cancelled"}
        end = wait.end
        if end is None:
            raise AcpError(INTERNAL_ERROR, f"{LOST}; load the session again")
        match end.status:
            case "completed":
                return {"stopReason": "end_turn"}
            case "cancelled":
                return {"stopReason": "cancelled"}
            case "paused":
                return {"stopReason": "max_turn_requests"}
            case "interrupted":
                raise AcpError(
                    INTERNAL_ERROR,
                    "the tether daemon stopped while the turn ran; send `continue` to resume",
                )
            case _:
                error = end.error
                message = error.message if error is not None else "the turn failed"
                data = {"code": error.code} if error is not None else None
                raise AcpError(INTERNAL_ERROR, message, data)

    def cancel(self) -> None:
        """`session/cancel`, on the reader thread: mark the prompts, cancel in the daemon on
        a thread of its own."""
        for wait in list(self.prompts):
            wait.cancelled = True
        self.agent.spawn(lambda: self._cancel_turn(None))

    def _cancel_turn(self, turn_id: str | None) -> None:
        params = TurnCancelParams(session_id=self.id, turn_id=turn_id)
        self.link.call_quietly(lambda: self.link.client.call(TURN_CANCEL, params))

    # --- approvals --------------------------------------------------------------------------

    def _ask(self, approval: ApprovalRequest) -> None:
        """Ask the editor (under the lock); the answer is waited for on a thread."""
        if approval.id in self.permissions:
            return
        options: list[JSON] = [{"optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once"}]
        if approval.always_rule:
            options.append(
                {
                    "optionId": ALLOW_ALWAYS,
                    "name": f"Always allow {approval.always_rule}",
                    "kind": "allow_always",
                }
            )
        options.append({"optionId": REJECT_ONCE, "name": "Deny", "kind": "reject_once"})
        item = self.translator.tool_item(approval.item_id)
        waiter = self.agent.peer.send_request(
            "session/request_permission",
            {
                "sessionId": self.id,
                "toolCall": permission_tool_call(approval, item, self.link.workspace),
                "options": options,
            },
        )
        self.permissions[approval.id] = waiter
        self.agent.spawn(lambda: self._answer(approval, waiter))

    def _answer(self, approval: ApprovalRequest, waiter: Pending) -> None:
        try:
            answer = p.read(p.PermissionAnswer, waiter.wait(), "session/request_permission")
            outcome = answer.outcome
        except Abandoned:
            return
        except AcpError as exc:
            outcome = p.CancelledOutcome()
            log(f"the editor did not answer approval {approval.id}: {exc.message}")
        with self.lock:
            if self.permissions.get(approval.id) is not waiter:
                return
            del self.permissions[approval.id]
        if isinstance(outcome, p.CancelledOutcome):
            # ACP's answer for a cancelled turn, not a refusal: the turn's cancel denies it,
            # or it waits for another client, as with no client attached.
            return
        match outcome:
            case p.SelectedOutcome(option_id=option) if option == ALLOW_ONCE:
                decision, scope, message = "allow", "once", ""
            case p.SelectedOutcome(option_id=option) if option == ALLOW_ALWAYS:
                decision, scope, message = "allow", "always", ""
            case p.SelectedOutcome(option_id=option) if option == REJECT_ONCE:
                decision, scope, message = "deny", "once", ""
            case _:
                # An option we did not offer: never taken as a yes.
                decision, scope, message = "deny", "once", "unknown answer from the editor"
        respond = ApprovalRespondParams(
            session_id=self.id,
            approval_id=approval.id,
            decision=decision,
            scope=scope,
            message=message,
        )
        self.link.call_quietly(lambda: self.link.client.call(APPROVAL_RESPOND, respond))

    def close(self) -> None:
        """`session/close`: cancel this editor's prompt, if one runs (a turn another client
        started goes on), and detach."""
        if self.prompts:
            self.cancel()
        with self.lock:
            permissions, self.permissions = self.permissions, {}
            self.cursor = None
        for waiter in permissions.values():
            self.agent.peer.abandon(waiter, "the session was closed")
        self.link.call_quietly(
            lambda: self.link.client.call(SESSION_DETACH, SessionRef(session_id=self.id))
        )
