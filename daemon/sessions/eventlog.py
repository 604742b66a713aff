"""Reading a session's persisted event log in pages (`session/events`): what
`tether export --format json` writes, and what a tool outside the daemon reads."""

from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.session import event_decoder
from tether.protocol.methods import (
    EVENTS_MAX_PAGE,
    EventRecord,
    SessionEventsParams,
    SessionEventsResult,
)


async def read_events(sessions: Sessions, p: SessionEventsParams) -> SessionEventsResult:
    """The page of `p`, with the session as it is now; SESSION_NOT_FOUND for no session.
    Sees every event the session emitted before the call (the store reads behind its
    queued writes)."""
    session = await sessions.get(p.session_id)
    info = session.info()
    limit = max(1, min(p.limit, EVENTS_MAX_PAGE))
    found = await sessions.store.events_after(session.id, p.after_seq, limit + 1)
    return SessionEventsResult(
        session=info,
        events=[
            EventRecord(seq=seq, event=event_decoder.decode(body)) for seq, body in found[:limit]
        ],
        more=len(found) > limit,
    )
