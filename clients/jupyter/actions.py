"""What each magic does, against the daemon of the notebook's workspace.

The workspace is the kernel's current directory's: the git root above it, else the directory
itself, as for the CLI. Each action opens its own connection and closes it when it returns
(an interrupted follow leaves a connection that cannot be trusted; a new one costs a
millisecond). The notebook's session is the one its `%%tether` cells talk to: created by the
first, kept for the kernel's life, and taken over by `%tether attach` and by answering an
approval, so after a kernel restart `%tether attach` is how a notebook finds its session
again.

Failures the person can act on raise `Problem` with a message that says what to do; nothing
is sent when a magic's arguments are wrong.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from tether.clients.core.discovery import DaemonUnavailable, find_workspace
from tether.clients.core.rpc import CallError, Client
from tether.clients.core.text import visible
from tether.clients.core.websocket import WebSocketError
from tether.jupyter import follow as following
from tether.jupyter.follow import Outcome, Screen
from tether.jupyter.render import Bundle, answered_bundle, message_bundle, sessions_bundle
from tether.jupyter.view import TurnView, last_turn
from tether.protocol.error_data import ApprovalAnswered
from tether.protocol.errors import ErrorCode
from tether.protocol.events import Decision, DecisionScope, PermissionMode
from tether.protocol.methods import (
    APPROVAL_LIST,
    APPROVAL_RESPOND,
    SESSION_CREATE,
    SESSION_LIST,
    TURN_CANCEL,
    TURN_START,
    ApprovalRespondParams,
    PendingApproval,
    SessionCreateParams,
    TurnCancelParams,
    TurnStartParams,
)
from tether.protocol.session import Cursor, SessionInfo

CLIENT_NAME = "tether-jupyter"


class Problem(Exception):
    """A magic could not do what it was asked; the message says why and what to do."""


class Cell(Protocol):
    """The output of the cell a magic runs in."""

    def screen(self) -> Screen:
        """A new live output, drawn in place as the turn goes on."""
        ...

    def show(self, bundle: Bundle) -> None:
        """Add one output."""
        ...

    def waiting(self, view: TurnView, screen: Screen) -> None:
        """The turn on `screen` waits for an approval (`view.pending`): offer answers beyond
        the magics the view already names (buttons)."""
        ...


def _connect(workspace: Path) -> Client:
    return Client.connect(workspace, client_name=CLIENT_NAME)


@dataclass
class Notebook:
    """The notebook's side of tether, one per kernel."""

    session_id: str | None = None
    """The notebook's session: the one `%%tether` cells talk to."""
    workspace: Callable[[], Path] = find_workspace
    connect: Callable[[Path], Client] = field(default=_connect)

    def client(self) -> Client:
        try:
            return self.connect(self.workspace())
        except DaemonUnavailable as exc:
            raise Problem(str(exc)) from exc
        except (OSError, WebSocketError) as exc:
            raise Problem(f"could not reach the daemon: {exc}") from exc

    # --- the magics ---------------------------------------------------------------------------

    def run(
        self,
        cell: Cell,
        text: str,
        *,
        new: bool = False,
        session: str | None = None,
        mode: PermissionMode | None = None,
    ) -> Outcome:
        """`%%tether`: send `text` to the notebook's session (a new one with `new`, or the one
        `session` names) and follow the turn it starts (or, when one runs, joins)."""
        if not text.strip():
            raise Problem("the cell is empty: write what to ask below %%tether")
        with self.client() as client:
            if session is not None:
                session_id = _resolve(client, session).id
            elif new or self.session_id is None:
                session_id = client.call(SESSION_CREATE, SessionCreateParams()).session.id
            else:
                session_id = self.session_id
            self.session_id = session_id
            try:
                attached = following.attach(client, session_id)
            except CallError as exc:
                if exc.code != ErrorCode.SESSION_NOT_FOUND:
                    raise
                raise Problem(
                    f"session {session_id} is gone; %%tether --new starts another"
                ) from None
            snapshot = attached.snapshot
            assert snapshot is not None  # an attach without a cursor brings one
            started = client.call(
                TURN_START, TurnStartParams(session_id=session_id, text=text, permission_mode=mode)
            )
            view = TurnView(session_id=session_id, turn_id=started.turn_id)
            joined = next((t for t in snapshot.turns if t.id == started.turn_id), None)
            if joined is not None:  # the text was queued for the turn that runs
                view.reload(snapshot, joined)
            for problem in started.problems:
                cell.show(message_bundle(problem))
            return self._follow(client, cell, cell.screen(), view, following.cursor_of(attached))

    def attach(self, cell: Cell, session: str | None) -> Outcome | None:
        """`%tether attach`: show the session's running turn (else its last), whole, and
        follow it to its end. The session is the one `session` names, else the notebook's,
        else the workspace's most recently active one."""
        with self.client() as client:
            if session is not None:
                info = _resolve(client, session)
            elif self.session_id is not None:
                info = _resolve(client, self.session_id)
            else:
                info = _latest(client)
            self.session_id = info.id
            attached = following.attach(client, info.id)
            assert attached.snapshot is not None  # an attach without a cursor brings one
            turn = last_turn(attached.snapshot)
            if turn is None:
                cell.show(message_bundle(f"session {info.id} has no turns yet"))
                return None
            view = TurnView.from_snapshot(attached.snapshot, turn)
            return self._follow(client, cell, cell.screen(), view, following.cursor_of(attached))

    def sessions(self, cell: Cell) -> None:
        """`%tether sessions`: the workspace's sessions, the notebook's marked."""
        with self.client() as client:
            listed = client.call(SESSION_LIST).sessions
        cell.show(sessions_bundle(listed, self.session_id))

    def cancel(self, cell: Cell, session: str | None) -> None:
        """`%tether cancel`: cancel the running turn of the session named, else the
        notebook's."""
        with self.client() as client:
            session_id = _resolve(client, session).id if session else self.session_id
            if session_id is None:
                raise Problem("this notebook has no session yet; name one: %tether cancel ID")
            try:
                cancelled = client.call(TURN_CANCEL, TurnCancelParams(session_id=session_id))
            except CallError as exc:
                if exc.code != ErrorCode.NO_RUNNING_TURN:
                    raise
                cell.show(message_bundle(f"session {session_id} has no running turn"))
                return
        cell.show(message_bundle(f"cancelling turn {cancelled.turn_id}"))

    def answer(
        self,
        cell: Cell,
        approval: str | None,
        decision: Decision,
        *,
        always: bool = False,
        message: str = "",
    ) -> Outcome | None:
        """`%tether approve` / `%tether deny`: answer the pending approval `approval` names
        (an id or its start), else the only one of the notebook's session (else of the
        workspace), then follow its turn on in this cell."""
        with self.client() as client:
            picked = self._pick(client, approval)
            if always and not picked.approval.always_rule:
                raise Problem(
                    f"approval {picked.approval.id} offers no rule to allow always;"
                    f" approve it without --always"
                )
            scope: DecisionScope = "always" if always else "once"
            self._respond(client, cell, picked, decision, scope, message)
            return self.follow_turn(client, cell, cell.screen(), picked)

    def answer_on(
        self,
        cell: Cell,
        screen: Screen,
        picked: PendingApproval,
        decision: Decision,
        scope: DecisionScope,
    ) -> Outcome | None:
        """A button's answer to `picked`: then follow its turn on `screen`, the cell that
        showed the approval (also when another client answered first: the cell then shows
        where the turn got to, not the wait it showed)."""
        with self.client() as client:
            self._respond(client, cell, picked, decision, scope, "")
            return self.follow_turn(client, cell, screen, picked)

    # --- the parts ----------------------------------------------------------------------------

    def follow_turn(
        self, client: Client, cell: Cell, screen: Screen, picked: PendingApproval
    ) -> Outcome | None:
        self.session_id = picked.session_id
        attached = following.attach(client, picked.session_id)
        assert attached.snapshot is not None
        turn = next((t for t in attached.snapshot.turns if t.id == picked.approval.turn_id), None)
        if turn is None:
            return None
        view = TurnView.from_snapshot(attached.snapshot, turn)
        return self._follow(client, cell, screen, view, following.cursor_of(attached))

    def _follow(
        self,
        client: Client,
        cell: Cell,
        screen: Screen,
        view: TurnView,
        cursor: Cursor,
    ) -> Outcome:
        outcome = following.follow(client, view, screen, cursor)
        if outcome == "approval":
            cell.waiting(view, screen)
        return outcome

    def _pick(self, client: Client, approval: str | None) -> PendingApproval:
        pending = client.call(APPROVAL_LIST).approvals
        if approval:
            pending = [p for p in pending if p.approval.id.startswith(approval)]
            where = f"matching {approval!r}"
        else:
            own = [p for p in pending if p.session_id == self.session_id]
            pending = own or pending
            where = "in this workspace"
        if not pending:
            raise Problem(f"no pending approval {where}")
        if len(pending) > 1:
            listed = "\n".join(
                f"  {p.approval.id}  {p.approval.tool}  (session {p.session_id})" for p in pending
            )
            raise Problem(f"{len(pending)} approvals are pending {where}; name one:\n{listed}")
        return pending[0]

    def _respond(
        self,
        client: Client,
        cell: Cell,
        picked: PendingApproval,
        decision: Decision,
        scope: DecisionScope,
        message: str,
    ) -> None:
        """Answer `picked`; when someone answered first, say who and how in the cell."""
        params = ApprovalRespondParams(
            session_id=picked.session_id,
            approval_id=picked.approval.id,
            decision=decision,
            scope=scope,
            message=message,
        )
        try:
            client.call(APPROVAL_RESPOND, params)
        except CallError as exc:
            if exc.code not in (ErrorCode.APPROVAL_RESOLVED, ErrorCode.APPROVAL_NOT_FOUND):
                raise
            cell.show(message_bundle(f"approval {picked.approval.id} was {_answered(exc)}"))
            return
        cell.show(answered_bundle(picked, "allowed" if decision == "allow" else "denied"))


def _answered(exc: CallError) -> str:
    """`already answered (allowed) by tether-cli`, from an APPROVAL_RESOLVED error's data."""
    try:
        first = msgspec.convert(exc.data, ApprovalAnswered)
    except msgspec.ValidationError:
        return "already answered"
    verb = "allowed" if first.decision == "allow" else "denied"
    return f"already answered ({verb}) by {visible(first.by)}"


def _resolve(client: Client, ref: str) -> SessionInfo:
    """The session `ref` names by id or unique id start."""
    sessions = client.call(SESSION_LIST).sessions
    matches = [s for s in sessions if s.id == ref] or [s for s in sessions if s.id.startswith(ref)]
    if not matches:
        raise Problem(f"no session matches {ref!r}; %tether sessions lists them")
    if len(matches) > 1:
        raise Problem(f"{ref!r} matches several sessions; give more of its id")
    return matches[0]


def _latest(client: Client) -> SessionInfo:
    sessions = client.call(SESSION_LIST).sessions
    if not sessions:
        raise Problem("this workspace has no sessions yet; start one with %%tether")
    running = [s for s in sessions if s.status == "running"]
    return (running or sessions)[0]
