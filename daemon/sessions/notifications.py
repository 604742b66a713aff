"""A turn's notifications: its approval requests and its end, scheduled with the daemon's
`Notifier` unless a controller saw them (`tether.daemon.hooks.notify` has the rules).

A controller "saw" an event when it was attached to the session as the event was emitted;
one that attaches later sees the pending ones (`Sessions` reports it with `Notifier.seen`).
"""

import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

from tether.daemon.hooks.notify import (
    NOTIFIED_ENDS,
    Notifier,
    NotifySettings,
    approval_event,
    turn_end_event,
)
from tether.daemon.sessions.session import Session
from tether.protocol.events import ApprovalRequest, TurnEndStatus, TurnError


def has_controller(session: Session) -> bool:
    """A client is attached to `session` as controller."""
    return "controller" in session.subscribers.values()


class TurnNotifications:
    """The notifications of one turn of `session`, working in `workspace`."""

    def __init__(
        self, notifier: Notifier, session: Session, workspace: Path, settings: NotifySettings
    ) -> None:
        self.notifier = notifier
        self.session = session
        self.workspace = workspace
        self.settings = settings

    @contextmanager
    def waiting(self, request: ApprovalRequest) -> Generator[None]:
        """While the turn waits for an answer to `request`: its notification is scheduled
        when no controller is attached, and cancelled once the wait is over (answered, or the
        turn cancelled) if it has not gone out yet. Enter it before the request is emitted."""
        if not has_controller(self.session):
            event = approval_event(
                request,
                session_id=self.session.id,
                session_title=self.session.title,
                workspace=self.workspace,
            )
            self.notifier.schedule(request.id, event, self.settings)
        try:
            yield
        finally:
            self.notifier.cancel(request.id)

    def turn_ended(self, turn_id: str, status: TurnEndStatus, error: TurnError | None) -> None:
        """The turn has emitted `turn_completed`: notify its end unless a controller got it or
        nobody needs to hear of it (cancelled, interrupted)."""
        if status not in NOTIFIED_ENDS or has_controller(self.session):
            return
        event = turn_end_event(
            turn_id,
            status,
            error,
            session_id=self.session.id,
            session_title=self.session.title,
            workspace=self.workspace,
            at=time.time(),
        )
        self.notifier.schedule(turn_id, event, self.settings)
