"""Following one turn of a session: attach as its controller, render its events until it
completes, answer its approvals, and cancel it on Ctrl-C (a second Ctrl-C leaves it running).
While it waits for events it lets the renderer's clock run (`Renderer.tick`)."""

from tether.clients.cli.approvals import ApprovalAnswerer
from tether.clients.cli.render import Renderer, visible
from tether.clients.rpc import Client
from tether.protocol.events import ApprovalRequested, ApprovalResolved, TurnCompleted, TurnStatus
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

ANSWER_POLL_S = 0.1
"""How often the terminal's answer is looked for while an approval is being asked, and the
renderer's clock ticks while something on screen moves."""


class Follower:
    """Follows one turn's events until it completes, re-attaching after a resync, and
    answers the turn's approvals (see `ApprovalAnswerer`)."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        renderer: Renderer,
        *,
        interactive: bool = False,
        answer_approvals: bool = True,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.renderer = renderer
        self.cursor = Cursor(seq=0)
        self.approvals = ApprovalAnswerer(
            client, session_id, interactive=interactive, enabled=answer_approvals
        )

    def attach(self, after: Cursor | None = None) -> SessionAttachResult:
        result = self.client.call(
            SESSION_ATTACH,
            SessionAttachParams(session_id=self.session_id, after=after, role="controller"),
        )
        self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
        return result

    def follow(self, turn_id: str) -> TurnStatus:
        """The status turn `turn_id` ended with; `attach` first."""
        cancelled = False
        while True:
            try:
                self.approvals.poll()
                self.renderer.tick()
                polling = self.approvals.waiting or self.renderer.wants_ticks
                try:
                    method, params = self.client.next_notification(
                        timeout=ANSWER_POLL_S if polling else None
                    )
                except TimeoutError:
                    continue
            except KeyboardInterrupt:
                if cancelled:
                    raise
                cancelled = True
                self.renderer.say("cancelling (Ctrl-C again to leave it)", "warning")
                self.client.call(
                    TURN_CANCEL,
                    TurnCancelParams(session_id=self.session_id, turn_id=turn_id),
                )
                continue
            if method == "session/resync":
                self.attach(self.cursor)
                continue
            if isinstance(params, DaemonEventParams):
                self.renderer.say(visible(params.message))
                continue
            if not isinstance(params, SessionEventParams) or params.session_id != self.session_id:
                continue
            self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
            event_turn = getattr(params.event, "turn_id", None)
            if event_turn is not None and event_turn != turn_id:
                continue  # another turn's events; session-wide ones (renames) still show
            self.renderer.event(params)
            match params.event:
                case ApprovalRequested(approval=approval) if approval.turn_id == turn_id:
                    self.approvals.requested(approval)
                case ApprovalResolved(approval_id=approval_id):
                    self.approvals.resolved(approval_id)
                case TurnCompleted(status=status):
                    return status
                case _:
                    pass
