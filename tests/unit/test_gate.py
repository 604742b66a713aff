"""The session's gate: an edit whose preview raises is answered without asking anyone; a
read it denies starts no language server."""

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
from tether.daemon.tools.read_file import ReadFile, ReadFileParams
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


async def test_a_read_the_gate_denies_starts_no_language_server(
    session: Session, tmp_path: Path
) -> None:
    """Language servers may run programs of the workspace: a read that the rules deny must
    not start one (the prewarm comes after the verdict), while an allowed read does."""
    prewarmed: list[Path] = []
    gate = SessionGate(
        session=session,
        broker=ApprovalBroker(session),
        policy=PermissionPolicy(mode="auto", deny=["read_file(secret.py)"]),
        tools=ToolRegistry([ReadFile()]),
        workspace=tmp_path,
        turn_id="t1",
        context=lambda _item: ToolContext(tmp_path),
        prewarm=prewarmed.append,
    )

    def read(path: str) -> ToolCall:
        return ToolCall(id="i1", call_id="c1", tool="read_file", arguments=f'{{"path": "{path}"}}')

    with trio.fail_after(10):
        denied = await gate.check(read("secret.py"), ReadFileParams(path="secret.py"))
        assert denied is not None
        assert denied.startswith("Permission denied")
        assert prewarmed == []
        assert await gate.check(read("app.py"), ReadFileParams(path="app.py")) is None
    assert prewarmed == [tmp_path / "app.py"]
