"""The Node.js client, written from the published schema, drives the real daemon."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home
from tether.testing import ModelServer

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "clients" / "node"


@pytest.fixture
def node() -> str:
    node = shutil.which("node")
    assert node is not None, "Node.js is required for the Node client tests"
    assert (NODE_CLIENT / "node_modules" / "ws").is_dir(), (
        "run `npm ci --prefix clients/node` first (the README's test command does)"
    )
    return node


@pytest.mark.shared_daemon
def test_node_client_runs_a_turn_against_the_daemon(
    node: str, daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
                {"text": "It greets.", "chunks": 3},
            ]
        }
    )
    result = subprocess.run(
        [
            node,
            str(NODE_CLIENT / "tether-client.mjs"),
            "--workspace",
            str(workspace),
            "--json",
            "--prompt",
            "what does it do?",
        ],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["event"]["type"] for e in events]
    assert kinds[0] == "turn_started"
    assert kinds[-1] == "turn_completed"
    assert events[-1]["event"]["status"] == "completed"
    completed = [e["event"]["item"] for e in events if e["event"]["type"] == "item_completed"]
    assert [i["type"] for i in completed] == [
        "user_message",
        "tool_call",
        "agent_message",
        "turn_summary",
    ]
    assert completed[1]["output"].startswith("1\t# Demo project")
    assert completed[2]["text"] == "It greets."
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


@pytest.mark.shared_daemon
def test_node_client_reports_a_failed_turn(
    node: str, daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"steps": [{"error": {"status": 404, "message": "no such model"}}]})
    result = subprocess.run(
        [
            node,
            str(NODE_CLIENT / "tether-client.mjs"),
            "--workspace",
            str(workspace),
            "--prompt",
            "hi",
        ],
        env=home.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "TETHER_MODEL" in result.stdout + result.stderr


def test_node_client_unit_tests(node: str) -> None:
    result = subprocess.run(
        [node, "--test", "test/"],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
