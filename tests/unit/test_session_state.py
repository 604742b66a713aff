"""What `session/list` says a session is doing — running, waiting for an approval, or how its
last turn ended — and its model and mode, for loaded sessions and for those listed from the
store alone. Handlers over real `Sessions`, the real store and the scripted model server."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.inprocess import running_sessions
from tests.unit.test_handlers import PAUSE, Client, DaemonParts, Rig, created
from tether.daemon.procs.table import ProcessTable
from tether.daemon.sessions.store import Store
from tether.protocol.events import ApprovalRequested, TurnCompleted, TurnStarted
from tether.protocol.methods import SessionListResult
from tether.protocol.session import SessionInfo
from tether.testing import ModelServer

KEEP_IDLE = 2


@pytest.fixture
async def small_rig(
    tmp_path: Path, sqlite_store: Store, model_server: ModelServer
) -> AsyncIterator[Rig]:
    """The handlers' rig keeping only `KEEP_IDLE` idle sessions loaded."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    processes = ProcessTable(record=tmp_path / "processes.json")
    with trio.fail_after(20):
        async with running_sessions(
            sqlite_store, workspace, model_server, keep_idle=KEEP_IDLE
        ) as sessions:
            rig = Rig(DaemonParts(workspace, sessions, processes), model_server)
            try:
                yield rig
            finally:
                rig.close()


async def listed(client: Client) -> dict[str, SessionInfo]:
    result = await client.call("session/list")
    assert isinstance(result, SessionListResult)
    return {info.id: info for info in result.sessions}


async def test_each_session_s_state_model_and_mode_are_listed_loaded_or_not(
    small_rig: Rig,
) -> None:
    rig = small_rig
    rig.server.set_script(
        {
            "steps": [
                {"text": "fine"},
                {"error": {"status": 401, "message": "who are you"}},
                PAUSE,
                PAUSE,
            ]
        }
    )
    client = await rig.client()

    async def turn(session_id: str) -> None:
        await client.call("turn/start", sessionId=session_id, text="go")

    completed = await created(client, model="chosen", permissionMode="ask")
    failed = await created(client)
    cancelled = await created(client)
    waiting = await created(client)
    for session_id in (completed, failed, cancelled, waiting):
        await client.call("session/attach", sessionId=session_id)
    assert {i.state for i in (await listed(client)).values()} == {"idle"}

    await turn(completed)
    await client.next_event(lambda e: isinstance(e, TurnCompleted))
    await turn(failed)
    await client.next_event(lambda e: isinstance(e, TurnCompleted))
    await turn(cancelled)
    await client.next_event(lambda e: isinstance(e, ApprovalRequested))
    await turn(waiting)
    await client.next_event(lambda e: isinstance(e, TurnStarted))
    await client.next_event(lambda e: isinstance(e, ApprovalRequested))
    await client.call("turn/cancel", sessionId=cancelled)
    await client.next_event(lambda e: isinstance(e, TurnCompleted))
    states = {sid: info.state for sid, info in (await listed(client)).items()}
    assert states == {
        completed: "idle",
        failed: "failed",
        cancelled: "cancelled",
        waiting: "awaiting_approval",
    }

    # Unloaded: detached and pushed out by newer idle sessions, listed from their rows.
    for session_id in (completed, failed, cancelled):
        await client.call("session/detach", sessionId=session_id)
    for _ in range(KEEP_IDLE + 1):
        await created(client)
    sessions = rig.parts.sessions
    assert all(sessions.loaded(s) is None for s in (completed, failed, cancelled))
    info = await listed(client)
    assert (info[completed].state, info[completed].model, info[completed].permission_mode) == (
        "idle",
        "chosen",
        "ask",
    )
    assert (info[failed].state, info[cancelled].state) == ("failed", "cancelled")
    assert info[waiting].state == "awaiting_approval"
    assert info[waiting].status == "running"
