"""The code-intelligence tools as the daemon runs them, with its warm basedpyright: a rename
across files asks in `ask` mode with one multi-file diff, gets diagnostics for every file it
changed, and is undone as one step."""

from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    attach,
    collect_until_turn_end,
    completed_items,
    create_session,
    read_events,
    start_turn,
    wait_until,
)
from tether.protocol.events import ApprovalRequested
from tether.protocol.items import ToolCall
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    LSP_STATUS,
    SESSION_UNDO,
    TURN_START,
    ApprovalRespondParams,
    SessionUndoParams,
    TurnStartParams,
)
from tether.testing import ModelServer

# billing.py holds a type error of its own: the rename's report names it, so the files the
# rename changed besides the one it was asked about are checked too.
BILLING = (
    "def compute_total(prices: list[float]) -> float:\n    return sum(prices)\n\n"
    'LIMIT: int = "ten"\n'
)
APP = "from billing import compute_total\n\nTOTAL = compute_total([1.0, 2.0])\n"
UNRELATED = "def compute_total(count: int) -> int:\n    return count\n"


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


@pytest.mark.language_servers
def test_a_rename_asks_with_one_diff_is_checked_and_undone_as_one_step(
    daemon: DaemonProcess, workspace: Path, model_server: ModelServer
) -> None:
    files = {"billing.py": BILLING, "app.py": APP, "inventory.py": UNRELATED}
    for name, text in files.items():
        (workspace / name).write_text(text)
    rename = call(
        "rename_symbol", path="app.py", line=3, symbol="compute_total", new_name="grand_total"
    )
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [call("hover", path="app.py", line=3, symbol="compute_total")]},
                {"text": "looked"},
                {"tool_calls": [rename]},
                {"text": "renamed"},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "look")
        collect_until_turn_end(client, session_id, timeout=60)

        def running() -> bool:
            servers = client.call(LSP_STATUS).servers
            return any(s.name == "basedpyright" and s.state == "running" for s in servers)

        wait_until(running, "basedpyright did not start", timeout=30)
        client.call(
            TURN_START,
            TurnStartParams(session_id=session_id, text="rename", permission_mode="ask"),
        )
        events = read_events(
            client,
            session_id,
            lambda evs: any(isinstance(e.event, ApprovalRequested) for e in evs),
            timeout=60,
        )
        (request,) = [e.event.approval for e in events if isinstance(e.event, ApprovalRequested)]
        assert (request.kind, request.path) == ("edit", "app.py")
        assert "+++ b/app.py" in request.preview
        assert "+++ b/billing.py" in request.preview
        assert "+def grand_total(prices: list[float]) -> float:" in request.preview
        assert "inventory.py" not in request.preview
        assert (workspace / "billing.py").read_text() == BILLING
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(session_id=session_id, approval_id=request.id, decision="allow"),
        )
        done = collect_until_turn_end(client, session_id, timeout=60)
        calls = [i for i in completed_items(done) if isinstance(i, ToolCall)]
        (renamed,) = [i for i in calls if i.tool == "rename_symbol"]
        assert renamed.status == "completed", renamed.output
        assert renamed.output.startswith(
            "Renamed compute_total to grand_total in 2 files (app.py, billing.py): 3 places."
        )
        assert "billing.py:4:" in renamed.output
        assert "+++ b/billing.py" in renamed.diff
        assert (workspace / "app.py").read_text() == APP.replace("compute_total", "grand_total")
        assert (workspace / "billing.py").read_text() == BILLING.replace(
            "compute_total", "grand_total"
        )
        assert (workspace / "inventory.py").read_text() == UNRELATED
        undone = client.call(SESSION_UNDO, SessionUndoParams(session_id=session_id))
    assert undone.applied
    assert sorted(undone.restored) == ["app.py", "billing.py"]
    for name, text in files.items():
        assert (workspace / name).read_text() == text
