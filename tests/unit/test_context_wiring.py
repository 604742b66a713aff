"""The session's compactor: a summary the model cannot give is a warning, not a failure."""

from pathlib import Path

import trio

from tether.daemon.context.history import History
from tether.daemon.providers.base import ModelRequest, ModelResponse, StreamCallbacks, ToolSet
from tether.daemon.sessions.context import SessionContext
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.protocol.items import Notice


class EmptySummaries:
    model = "fake"
    provider = "fake"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, callbacks: StreamCallbacks) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(text="")

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


async def test_empty_summary_becomes_a_warning(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite3")
    store.open()
    try:
        session = Session(SessionRow("s_1", "", 0.0, 0.0, 0, None), store)
        history = History("system prompt")
        for index in range(6):
            history.add_user(f"question {index} " + "x" * 3000)
            history.add_assistant(f"answer {index} " + "y" * 3000, [])
        model = EmptySummaries()
        context = SessionContext(
            session, history, model, ToolSet(specs=[]), window=2000, max_output=500
        )
        before = list(history.messages)
        with trio.fail_after(10):
            items = await context.before_call(history, new_turn=False)
        assert model.requests, "the ladder should have asked for a summary"
        assert [type(i) for i in items] == [Notice]
        notice = items[0]
        assert isinstance(notice, Notice)
        assert notice.code == "compaction_failed"
        assert history.messages == before
        assert session.context.used > session.context.budget > 0
    finally:
        store.close()
