"""The daemon's JSON-RPC methods in-process: `Handlers` over real `Sessions`, the real store in
a temporary folder and the scripted model server over HTTP. Params are decoded from JSON by the
protocol's codec, as the connection does; each client is a real `Connection` (its websocket is
never read or written here: what the session sends it lands in its outbox)."""

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import Request

from tests.inprocess import decode_event, running_sessions, seqs_covered
from tether.daemon.lsp.pool import LspPool
from tether.daemon.procs.table import ProcessTable
from tether.daemon.rpc.connection import MAX_REQUESTS_IN_FLIGHT, Connection, Handler, Reply
from tether.daemon.rpc.handlers import Handlers
from tether.daemon.rpc.websocket import WebSocket
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.store import Store
from tether.daemon.workspace_trust import TrustRecord, WorkspaceTrust
from tether.protocol import codec
from tether.protocol.base import Wire
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import (
    AnyEvent,
    ApprovalRequested,
    ApprovalResolved,
    ItemCompleted,
    ItemDelta,
    SessionConfigured,
    TurnCompleted,
)
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.methods import (
    METHODS,
    NOTIFICATIONS,
    ApprovalListResult,
    DaemonStatusResult,
    InitializeResult,
    SessionAttachResult,
    SessionConfigureResult,
    SessionCreateResult,
    SessionEventParams,
    SessionListResult,
    SessionReadResult,
    TurnStartResult,
)
from tether.protocol.version import PROTOCOL_VERSION
from tether.testing import ModelServer

PAUSE = {
    "tool_calls": [
        {"name": "run_command", "arguments": {"command": "echo hi", "description": "say hi"}}
    ]
}
"""A step whose call asks for approval (mode `edits`): the turn waits until it is answered."""


class DaemonParts:
    """What `Handlers` needs of the daemon, made of the real parts."""

    def __init__(self, workspace: Path, sessions: Sessions, processes: ProcessTable) -> None:
        self.workspace = workspace
        self.started_at = time.time()
        self.idle_timeout = 0.0
        self.sessions = sessions
        self.connections: set[Connection] = set()
        self.processes = processes
        self.lsp = LspPool(workspace, builtin=False)
        self.trust = WorkspaceTrust(TrustRecord(None), on_change=[self.lsp.trust_changed])
        self.shutdown_reasons: list[str] = []

    def request_shutdown(self, reason: str) -> None:
        self.shutdown_reasons.append(reason)


class Client:
    """One connection, with the handler table it is dispatched through."""

    def __init__(self, conn: Connection, table: dict[str, Handler]) -> None:
        self.conn = conn
        self.table = table
        self._unread: list[bytes] = []

    async def call(self, method: str, **params: Any) -> Wire:
        """Decode `params` (wire names) as the connection would, and run the handler."""
        decoded = codec.decode_params(method, msgspec.Raw(msgspec.json.encode(params)))
        reply = await self.table[method](self.conn, decoded)
        if isinstance(reply, Reply):
            for frame in reply.follow:
                self.conn.send_nowait(frame)
            return reply.result
        return reply

    async def next_event(self, found: Callable[[AnyEvent], bool]) -> AnyEvent:
        """The next event sent to this client that `found` accepts (those before it are
        passed over, those after it kept for the next call)."""
        while True:
            while self._unread:
                event = decode_event(self._unread.pop(0)).event
                if found(event):
                    return event
            self._unread = await self.conn.outbox.get_batch()


class Rig:
    def __init__(self, parts: DaemonParts, server: ModelServer) -> None:
        self.parts = parts
        self.server = server
        self.table = Handlers(parts).table()
        self._sockets: list[trio.socket.SocketType] = []

    async def client(self, name: str = "test", **initialize: Any) -> Client:
        """A connected, initialized client; `initialize` adds params (wire names)."""
        # A real websocket over one end of a socket pair; the handlers never touch it.
        ours, theirs = trio.socket.socketpair()
        self._sockets += [ours, theirs]
        ws = WebSocket(
            trio.SocketStream(ours),
            WSConnection(ConnectionType.SERVER),
            Request(host="127.0.0.1", target="/"),
            max_message_size=1 << 20,
        )
        client = Client(Connection(ws, self.table), self.table)
        result = await client.call("initialize", clientName=name, **initialize)
        assert isinstance(result, InitializeResult)
        return client

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


@pytest.fixture
async def rig(tmp_path: Path, sqlite_store: Store, model_server: ModelServer) -> AsyncIterator[Rig]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    processes = ProcessTable(record=tmp_path / "processes.json")
    with trio.fail_after(20):
        async with running_sessions(sqlite_store, workspace, model_server) as sessions:
            rig = Rig(DaemonParts(workspace, sessions, processes), model_server)
            try:
                yield rig
            finally:
                rig.close()


async def created(client: Client, **params: Any) -> str:
    result = await client.call("session/create", **params)
    assert isinstance(result, SessionCreateResult)
    return result.session.id


async def rpc_error(call: Any) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await call
    return caught.value


# --- sessions --------------------------------------------------------------------------------


async def test_a_created_session_is_listed_read_and_attached(rig: Rig) -> None:
    client = await rig.client()
    first = await created(client, title="first", permissionMode="ask")
    second = await created(client)
    listed = await client.call("session/list")
    assert isinstance(listed, SessionListResult)
    assert {s.id for s in listed.sessions} == {first, second}
    [info] = [s for s in listed.sessions if s.id == first]
    assert (info.title, info.permission_mode, info.status, info.turn_count) == (
        "first",
        "ask",
        "idle",
        0,
    )

    read = await client.call("session/read", sessionId=first)
    assert isinstance(read, SessionReadResult)
    assert read.snapshot.session == info
    # Reading does not subscribe; attaching does, with a snapshot for a client without cursor.
    session = await rig.parts.sessions.get(first)
    assert client.conn.role_in(session) is None
    attached = await client.call("session/attach", sessionId=first)
    assert isinstance(attached, SessionAttachResult)
    assert attached.mode == "snapshot"
    # The same, but for the client counting itself among those attached.
    attached_info = msgspec.structs.replace(info, clients=1)
    assert attached.snapshot == msgspec.structs.replace(read.snapshot, session=attached_info)
    assert client.conn.role_in(session) == "controller"
    assert await client.call("session/detach", sessionId=first) is not None
    assert client.conn.role_in(session) is None
    error = await rpc_error(client.call("session/detach", sessionId=first))
    assert error.code == ErrorCode.NOT_ATTACHED


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/read", {}),
        ("session/attach", {}),
        ("session/delete", {}),
        ("session/compact", {}),
        ("session/undo", {}),
        ("turn/start", {"text": "hi"}),
        ("turn/cancel", {}),
        ("approval/respond", {"approvalId": "a_1", "decision": "allow"}),
    ],
)
async def test_an_unknown_session_is_session_not_found(
    rig: Rig, method: str, params: dict[str, Any]
) -> None:
    client = await rig.client()
    error = await rpc_error(client.call(method, sessionId="s_nope", **params))
    assert error.code == ErrorCode.SESSION_NOT_FOUND
    assert "s_nope" in error.message


async def test_a_second_initialize_and_a_newer_protocol_are_refused(rig: Rig) -> None:
    client = await rig.client()
    error = await rpc_error(client.call("initialize", clientName="again"))
    assert error.code == ErrorCode.ALREADY_INITIALIZED
    assert isinstance(await client.call("daemon/status"), DaemonStatusResult)
    fresh = Client(Connection(client.conn.ws, rig.table), rig.table)
    error = await rpc_error(
        fresh.call("initialize", clientName="future", protocolVersion=PROTOCOL_VERSION + 1)
    )
    assert error.code == ErrorCode.UNSUPPORTED_PROTOCOL
    assert not fresh.conn.initialized


async def test_daemon_status_counts_what_is_loaded_and_shutdown_is_requested(rig: Rig) -> None:
    client = await rig.client()
    await created(client)
    status = await client.call("daemon/status")
    assert isinstance(status, DaemonStatusResult)
    assert (status.sessions_loaded, status.running_turns, status.workspace) == (
        1,
        0,
        str(rig.parts.workspace),
    )
    await client.call("daemon/shutdown")
    assert rig.parts.shutdown_reasons == ["requested by a client"]


# --- turns and approvals ---------------------------------------------------------------------


async def test_a_session_counts_the_clients_attached_to_it(rig: Rig) -> None:
    first, second = await rig.client(), await rig.client()
    session_id = await created(first)

    async def clients_listed() -> int:
        listed = await first.call("session/list")
        assert isinstance(listed, SessionListResult)
        [info] = [s for s in listed.sessions if s.id == session_id]
        return info.clients

    assert await clients_listed() == 0
    await first.call("session/attach", sessionId=session_id)
    attached = await second.call("session/attach", sessionId=session_id, role="observer")
    assert isinstance(attached, SessionAttachResult)
    assert attached.snapshot is not None
    assert attached.snapshot.session.clients == 2
    await first.call("session/attach", sessionId=session_id)  # again: still one client
    assert await clients_listed() == 2
    await second.call("session/detach", sessionId=session_id)
    assert await clients_listed() == 1


async def test_a_turn_runs_to_its_answer(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "hello there"}]})
    client = await rig.client()
    session_id = await created(client)
    await client.call("session/attach", sessionId=session_id)
    started = await client.call("turn/start", sessionId=session_id, text="hi")
    assert isinstance(started, TurnStartResult)
    assert not started.queued
    done = await client.next_event(lambda e: isinstance(e, TurnCompleted))
    assert isinstance(done, TurnCompleted)
    assert (done.turn_id, done.status) == (started.turn_id, "completed")
    read = await client.call("session/read", sessionId=session_id)
    assert isinstance(read, SessionReadResult)
    [turn] = read.snapshot.turns
    texts = [
        (type(i).__name__, i.text) for i in turn.items if isinstance(i, UserMessage | AgentMessage)
    ]
    assert texts == [("UserMessage", "hi"), ("AgentMessage", "hello there")]
    error = await rpc_error(client.call("turn/cancel", sessionId=session_id))
    assert error.code == ErrorCode.NO_RUNNING_TURN


async def test_a_session_s_model_and_mode_are_configured_and_its_turns_call_that_model(
    rig: Rig,
) -> None:
    rig.server.set_script({"steps": [{"text": "one"}, {"text": "two"}, {"text": "three"}]})
    client = await rig.client()
    session_id = await created(client, model="chosen-at-create")
    await client.call("session/attach", sessionId=session_id)

    async def turn(**params: Any) -> None:
        await client.call("turn/start", sessionId=session_id, text="hi", **params)
        await client.next_event(lambda e: isinstance(e, TurnCompleted))

    await turn()
    result = await client.call(
        "session/configure", sessionId=session_id, model="switched", permissionMode="auto"
    )
    assert isinstance(result, SessionConfigureResult)
    assert (result.session.model, result.session.permission_mode) == ("switched", "auto")
    configured = await client.next_event(lambda e: isinstance(e, SessionConfigured))
    assert configured == SessionConfigured(permission_mode="auto", model="switched")
    await turn()
    await turn(model="")  # back to the daemon's configured model
    models = [request["model"] for request in rig.server.requests]
    assert models == ["chosen-at-create", "switched", "scripted"]

    # Nothing changed: no event; an observer may not configure.
    await client.call("session/configure", sessionId=session_id, permissionMode="auto")
    observer = await rig.client("observer")
    await observer.call("session/attach", sessionId=session_id, role="observer")
    error = await rpc_error(observer.call("session/configure", sessionId=session_id, model="x"))
    assert error.code == ErrorCode.NOT_CONTROLLER
    session = await rig.parts.sessions.get(session_id)
    assert session.info().model == ""
    frames = session.ring.since(0)
    assert frames is not None
    configured_events = [
        decode_event(f).event
        for f in frames
        if isinstance(decode_event(f).event, SessionConfigured)
    ]
    assert configured_events == [
        SessionConfigured(model="chosen-at-create"),
        SessionConfigured(permission_mode="auto", model="switched"),
        SessionConfigured(model=""),
    ]


async def test_empty_text_is_invalid_params_and_starts_nothing(rig: Rig) -> None:
    client = await rig.client()
    session_id = await created(client)
    error = await rpc_error(client.call("turn/start", sessionId=session_id, text="  \n"))
    assert error.code == ErrorCode.INVALID_PARAMS
    assert "text" in error.message
    assert (await rig.parts.sessions.get(session_id)).turns == []


async def test_the_first_answer_to_an_approval_wins_and_an_observer_cannot_answer(
    rig: Rig,
) -> None:
    rig.server.set_script({"steps": [PAUSE, {"text": "done"}]})
    owner, other, watcher = await rig.client("a"), await rig.client("b"), await rig.client("o")
    session_id = await created(owner)
    for client, role in ((owner, "controller"), (other, "controller"), (watcher, "observer")):
        await client.call("session/attach", sessionId=session_id, role=role)
    await owner.call("turn/start", sessionId=session_id, text="run it")
    seen = [
        await c.next_event(lambda e: isinstance(e, ApprovalRequested))
        for c in (owner, other, watcher)
    ]
    assert all(isinstance(e, ApprovalRequested) for e in seen)
    assert seen[0] == seen[1] == seen[2]
    request = seen[0]
    assert isinstance(request, ApprovalRequested)
    approval_id = request.approval.id
    assert (request.approval.tool, request.approval.kind, request.approval.command) == (
        "run_command",
        "command",
        "echo hi",
    )
    assert "commands ask" in request.approval.reason
    assert request.approval.always_rule == "run_command(echo hi)"
    answer = {"sessionId": session_id, "approvalId": approval_id}

    error = await rpc_error(watcher.call("approval/respond", **answer, decision="allow"))
    assert error.code == ErrorCode.NOT_CONTROLLER
    error = await rpc_error(watcher.call("turn/start", sessionId=session_id, text="hijack"))
    assert error.code == ErrorCode.NOT_CONTROLLER
    await other.call("approval/respond", **answer, decision="allow")
    error = await rpc_error(owner.call("approval/respond", **answer, decision="deny"))
    assert error.code == ErrorCode.APPROVAL_RESOLVED
    assert "by b" in error.message
    error = await rpc_error(
        owner.call("approval/respond", sessionId=session_id, approvalId="a_x", decision="deny")
    )
    assert error.code == ErrorCode.APPROVAL_NOT_FOUND

    resolved = await owner.next_event(lambda e: isinstance(e, ApprovalResolved))
    assert isinstance(resolved, ApprovalResolved)
    assert (resolved.decision, resolved.by) == ("allow", "b")
    done = await owner.next_event(lambda e: isinstance(e, TurnCompleted))
    assert isinstance(done, TurnCompleted)
    assert done.status == "completed"
    session = await rig.parts.sessions.get(session_id)
    [call] = [i for i in session.items() if isinstance(i, ToolCall)]
    assert call.status == "completed"
    assert "hi" in call.output
    kinds = [
        type(i) for i in session.items() if isinstance(i, UserMessage | ToolCall | AgentMessage)
    ]
    assert kinds == [UserMessage, ToolCall, AgentMessage]


async def test_cancel_denies_the_pending_approval_and_ends_the_turn(rig: Rig) -> None:
    rig.server.set_script({"steps": [PAUSE, {"text": "never"}]})
    client, other = await rig.client("a"), await rig.client("b")
    session_id = await created(client)
    await client.call("session/attach", sessionId=session_id)
    await other.call("session/attach", sessionId=session_id)
    started = await client.call("turn/start", sessionId=session_id, text="go")
    assert isinstance(started, TurnStartResult)
    request = await client.next_event(lambda e: isinstance(e, ApprovalRequested))
    assert isinstance(request, ApprovalRequested)
    await client.call("turn/cancel", sessionId=session_id, turnId=started.turn_id)
    resolved = await other.next_event(lambda e: isinstance(e, ApprovalResolved))
    assert isinstance(resolved, ApprovalResolved)
    assert (resolved.decision, resolved.by) == ("deny", "daemon")
    done = await other.next_event(lambda e: isinstance(e, TurnCompleted))
    assert isinstance(done, TurnCompleted)
    assert done.status == "cancelled"
    error = await rpc_error(
        client.call(
            "approval/respond",
            sessionId=session_id,
            approvalId=request.approval.id,
            decision="allow",
        )
    )
    assert error.code == ErrorCode.APPROVAL_RESOLVED
    session = await rig.parts.sessions.get(session_id)
    [call] = [i for i in session.items() if isinstance(i, ToolCall)]
    assert call.status in ("cancelled", "failed")
    assert len(rig.server.requests) == 1


async def test_approval_list_gives_every_pending_approval_with_who_else_may_answer(
    rig: Rig,
) -> None:
    rig.server.set_script({"steps": [PAUSE, PAUSE, {"text": "done"}, {"text": "done"}]})
    asker, other, watcher = await rig.client("a"), await rig.client("b"), await rig.client("o")
    first, second, quiet = await created(asker), await created(asker), await created(asker)
    for client, role in ((asker, "controller"), (other, "controller"), (watcher, "observer")):
        await client.call("session/attach", sessionId=first, role=role)
    await asker.call("session/attach", sessionId=second)
    for session_id in (first, second):
        await asker.call("turn/start", sessionId=session_id, text="run it")
        await asker.next_event(lambda e: isinstance(e, ApprovalRequested))

    listed = await asker.call("approval/list")
    assert isinstance(listed, ApprovalListResult)
    assert [(p.session_id, p.approval.command) for p in listed.approvals] == [
        (first, "echo hi"),
        (second, "echo hi"),
    ]
    # Only another controller may answer: the observer and the asker itself do not count.
    assert [p.other_controllers for p in listed.approvals] == [1, 0]
    seen_by_other = await other.call("approval/list")
    assert isinstance(seen_by_other, ApprovalListResult)
    assert [p.other_controllers for p in seen_by_other.approvals] == [1, 1]
    assert quiet not in {p.session_id for p in listed.approvals}

    approval_id = listed.approvals[0].approval.id
    await other.call("approval/respond", sessionId=first, approvalId=approval_id, decision="deny")
    after = await asker.call("approval/list")
    assert isinstance(after, ApprovalListResult)
    assert [p.session_id for p in after.approvals] == [second]


# --- capabilities ----------------------------------------------------------------------------


async def test_initialize_says_what_the_daemon_serves_and_ignores_capabilities_it_does_not_know(
    rig: Rig,
) -> None:
    client = await rig.client("x")
    result = await rig.table["initialize"](
        Connection(client.conn.ws, rig.table),
        codec.decode_params(
            "initialize",
            msgspec.Raw(
                msgspec.json.encode(
                    {"clientName": "newer", "capabilities": {"itemDeltas": False, "later": [1]}}
                )
            ),
        ),
    )
    assert isinstance(result, InitializeResult)
    capabilities = result.capabilities
    assert capabilities.methods == list(METHODS)
    assert capabilities.notifications == list(NOTIFICATIONS)
    assert capabilities.client_notifications == ["$/cancelRequest"]
    assert capabilities.limits is not None
    assert capabilities.limits.max_message_bytes == 1 << 20
    assert capabilities.limits.max_requests_in_flight == MAX_REQUESTS_IN_FLIGHT


async def test_a_client_without_deltas_gets_every_other_event_live_and_replayed(rig: Rig) -> None:
    rig.server.set_script({"steps": [{"text": "Hello there, whole items", "chunks": 4}]})
    full = await rig.client("full")
    whole = await rig.client("whole", capabilities={"itemDeltas": False})
    session_id = await created(full)
    for client in (full, whole):
        await client.call("session/attach", sessionId=session_id)
    await full.call("turn/start", sessionId=session_id, text="hi")
    await rig.parts.sessions.wait_idle(session_id)

    async def frames(client: Client) -> list[SessionEventParams]:
        got: list[SessionEventParams] = []
        while not got or not isinstance(got[-1].event, TurnCompleted):
            got += [decode_event(f) for f in await client.conn.outbox.get_batch()]
        return got

    every, wanted = await frames(full), await frames(whole)
    # `full` read nothing while the turn ran: its waiting deltas came merged, gap-free.
    covered = seqs_covered(every)
    assert covered == list(range(1, len(covered) + 1))
    deltas = [e for e in every if isinstance(e.event, ItemDelta)]
    assert len(seqs_covered(deltas)) == 4
    assert "".join(e.event.delta for e in deltas if isinstance(e.event, ItemDelta)) == (
        "Hello there, whole items"
    )
    assert wanted == [e for e in every if not isinstance(e.event, ItemDelta)]
    [done] = [
        e.event
        for e in wanted
        if isinstance(e.event, ItemCompleted) and isinstance(e.event.item, AgentMessage)
    ]
    assert isinstance(done, ItemCompleted)
    assert isinstance(done.item, AgentMessage)
    assert done.item.text == "Hello there, whole items"

    # Re-attached with the cursor of its first event, it is replayed the rest, deltas left out.
    first = wanted[0]
    await whole.call(
        "session/attach", sessionId=session_id, after={"epoch": first.epoch, "seq": first.seq}
    )
    replayed = [decode_event(f) for f in await whole.conn.outbox.get_batch()]
    assert replayed == wanted[1:]
