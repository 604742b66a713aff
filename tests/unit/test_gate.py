"""The session's gate: an edit whose preview raises is answered without asking anyone."""

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import trio

from tether.daemon.sessions.approvals import ApprovalBroker, SessionGate
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.daemon.tools.base import ToolContext, ToolKind, ToolParams
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.turn.permissions import PermissionPolicy
from tether.protocol.items import ToolCall


class PathParams(ToolParams, frozen=True, kw_only=True):
    path: str


class BrokenPreview:
    """An edit tool whose preview has a bug."""

    name: ClassVar[str] = "broken_edit"
    description: ClassVar[str] = "test tool"
    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]] = PathParams

    def target_path(self, params: ToolParams) -> str:
        assert isinstance(params, PathParams)
        return params.path

    async def preview(self, params: ToolParams, ctx: ToolContext) -> str:
        raise ValueError("preview bug")

    async def run(self, params: ToolParams, ctx: ToolContext) -> str:
        return "ran"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    store = Store(tmp_path / "db.sqlite3")
    store.open()
    yield Session(SessionRow("s_1", "", 0.0, 0.0, 0, None), store)
    store.close()


async def test_a_preview_that_raises_is_the_calls_failure_not_the_turns(
    tmp_path: Path, session: Session
) -> None:
    gate = SessionGate(
        session=session,
        broker=ApprovalBroker(session),
        policy=PermissionPolicy(mode="ask"),
        tools=ToolRegistry([BrokenPreview()]),
        workspace=tmp_path,
        turn_id="t1",
        context=lambda _item: ToolContext(tmp_path),
    )
    item = ToolCall(id="i1", call_id="c1", tool="broken_edit", arguments='{"path": "a.txt"}')
    with trio.fail_after(10):
        answer = await gate.check(item, PathParams(path="a.txt"))
    assert answer is not None
    assert "broken_edit failed with an unexpected error (ValueError: preview bug)" in answer
    assert session.pending_approvals == {}
