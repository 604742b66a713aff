"""Workspace trust through the real daemon: `tether trust` (and `--revoke`, `--status`) and the
`workspace/trust` method, the state in `daemon/status`, remembered on the user's side across
restarts; and a workspace whose `.venv/bin/python` is never run by basedpyright until the user
trusts it, the session told once why its diagnostics may be incomplete."""

import json
import stat
import sys
from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    cli,
    collect_until_turn_end,
    create_session,
    start_daemon,
    start_turn,
    wait_until,
)
from tether.daemon.lsp.servers import RESTRICTED_NOTE
from tether.protocol.events import ItemCompleted
from tether.protocol.items import Notice
from tether.protocol.methods import (
    DAEMON_STATUS,
    LSP_STATUS,
    WORKSPACE_TRUST,
    WorkspaceTrustParams,
)
from tether.testing import ModelServer

TYPE_ERROR = "result: str = 2\n"


def test_tether_trust_sets_and_revokes_it_on_the_users_side(home: Home, workspace: Path) -> None:
    daemon = start_daemon(home, workspace)
    try:
        before = cli(home, "trust", "--status", "-w", str(workspace))
        with daemon.client() as client:
            untrusted = client.call(DAEMON_STATUS).workspace_trusted
        trusted = cli(home, "trust", "-w", str(workspace))
        shown = cli(home, "daemon", "status", "-w", str(workspace))
    finally:
        assert daemon.stop() == 0
    daemon = start_daemon(home, workspace)
    try:
        with daemon.client() as client:
            kept = client.call(DAEMON_STATUS).workspace_trusted
        revoked = json.loads(cli(home, "trust", "--revoke", "--json", "-w", str(workspace)).stdout)
        with daemon.client() as client:
            asked = client.call(WORKSPACE_TRUST, WorkspaceTrustParams())
    finally:
        assert daemon.stop() == 0
    assert before.returncode == 0, before.stderr
    assert before.stdout == (
        f"workspace not trusted: {workspace}; language servers run restricted, workspace "
        "skills ask first (tether trust to trust it)\n"
    )
    assert untrusted is False
    assert trusted.stdout.startswith("workspace trusted (by tether-cli, ")
    assert trusted.stdout.endswith(f"): {workspace}\n")
    assert "  trust     the workspace is trusted" in shown.stdout
    assert kept is True  # remembered across a restart
    assert (revoked["trusted"], revoked["workspace"]) == (False, str(workspace))
    assert asked.trusted is False
    assert asked.by == revoked["by"]
    [record] = (home.root / "state").rglob("workspace-trust.json")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert json.loads(record.read_text())["trusted"] is False
    assert not list(workspace.rglob("*trust*"))  # nothing in the workspace


def plant_interpreter(workspace: Path) -> Path:
    """A workspace `.venv` whose python leaves a marker before it runs; the marker's path."""
    marker = workspace / "workspace-python-ran"
    (workspace / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n')
    python = workspace / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    (workspace / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python.write_text(f'#!/bin/sh\necho ran >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return marker


@pytest.mark.language_servers
def test_an_untrusted_workspace_interpreter_runs_only_once_trusted(
    daemon: DaemonProcess, model_server: ModelServer, home: Home, workspace: Path
) -> None:
    marker = plant_interpreter(workspace)
    read = {"name": "read_file", "arguments": {"path": "src/app.py"}}
    write = {"name": "write_file", "arguments": {"path": "src/app.py", "content": TYPE_ERROR}}
    again = {"name": "write_file", "arguments": {"path": "src/app.py", "content": TYPE_ERROR * 2}}
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [read]},
                {"text": "read"},
                {"tool_calls": [write]},
                {"text": "wrote"},
                {"tool_calls": [again]},
                {"text": "wrote again"},
            ]
        }
    )
    with daemon.client() as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "read it")
        collect_until_turn_end(client, session_id)

        def basedpyright(restricted: bool) -> bool:
            servers = client.call(LSP_STATUS).servers
            return any(
                s.name == "basedpyright" and s.state == "running" and s.restricted == restricted
                for s in servers
            )

        wait_until(lambda: basedpyright(True), "basedpyright did not start", timeout=30)
        start_turn(client, session_id, "write it")
        untrusted_events = collect_until_turn_end(client, session_id, timeout=60)
        ran_untrusted = marker.exists()
        trusted = cli(home, "trust", "-w", str(workspace))
        start_turn(client, session_id, "write it again")
        collect_until_turn_end(client, session_id, timeout=60)
        running_trusted = basedpyright(False)
    assert not ran_untrusted
    assert trusted.returncode == 0, trusted.stderr
    assert marker.exists()
    assert running_trusted
    untrusted_result = model_server.requests[3]["messages"][-1]["content"]
    assert "src/app.py:1:" in untrusted_result
    assert untrusted_result.endswith(RESTRICTED_NOTE)
    trusted_result = model_server.requests[5]["messages"][-1]["content"]
    assert "src/app.py:1:" in trusted_result
    assert RESTRICTED_NOTE not in trusted_result
    notices = [
        e.event.item
        for e in untrusted_events
        if isinstance(e.event, ItemCompleted) and isinstance(e.event.item, Notice)
    ]
    assert [n.code for n in notices] == ["workspace_trust"]
    assert "`tether trust`" in notices[0].message
