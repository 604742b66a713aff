"""Skills through the real daemon: the user's trust in a workspace's skills outlives the
daemon, and `tether skills` lists what the agent can load and what is wrong with the rest."""

import json
from pathlib import Path

from tests.e2e.test_approvals import respond, wait_for_approval
from tests.support import (
    Home,
    attach,
    collect_until_turn_end,
    create_session,
    run_cli,
    start_daemon,
    start_turn,
)
from tests.unit.test_skills import write_skill
from tether.protocol.events import ApprovalRequested
from tether.testing import ModelServer

SKILL_CALL = {"tool_calls": [{"name": "skill", "arguments": {"name": "deploy"}}]}


def test_trust_in_the_workspace_skills_is_asked_once_and_survives_a_restart(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    write_skill(workspace / ".tether/skills", "deploy", "Deploy it.", "Run make deploy.")
    model_server.set_script({"steps": [SKILL_CALL, {"text": "a"}, SKILL_CALL, {"text": "b"}]})
    daemon = start_daemon(home, workspace)
    with daemon.client("first") as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "deploy")
        approval = wait_for_approval(client, session_id)
        assert approval.tool == "skill"
        respond(client, session_id, approval.id, "allow")
        collect_until_turn_end(client, session_id)
    assert daemon.stop() == 0

    daemon = start_daemon(home, workspace)
    with daemon.client("second") as client:
        session_id = create_session(client)
        attach(client, session_id)
        start_turn(client, session_id, "deploy again")
        events = collect_until_turn_end(client, session_id)
    assert not any(isinstance(e.event, ApprovalRequested) for e in events)
    listed = json.loads(run_cli(home, "skills", "-w", str(workspace), "--json").stdout)
    assert daemon.stop() == 0
    results = [
        m["content"] for r in model_server.requests for m in r["messages"] if m["role"] == "tool"
    ]
    assert "Run make deploy." in results[-1]
    assert listed["workspaceTrusted"] is True
    assert listed["skills"][0]["trusted"] is True


def test_tether_skills_lists_skills_and_the_invalid_ones(home: Home, workspace: Path) -> None:
    user = home.root / "config" / "tether" / "skills"
    write_skill(user, "release-notes", "Write release notes.")
    write_skill(workspace / ".agents/skills", "deploy", "Deploy it.", extra="paths: [ops/]\n")
    write_skill(workspace / ".tether/skills", "Bad_Name", "Broken.")
    daemon = start_daemon(home, workspace)
    try:
        shown = run_cli(home, "skills", "-w", str(workspace))
        as_json = run_cli(home, "skills", "-w", str(workspace), "--json")
    finally:
        daemon.stop()
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "deploy         Deploy it.  (.agents/skills)  [asks before first use]"
    assert lines[1].startswith("release-notes  Write release notes.  (")
    assert lines[2] == "not loaded:"
    assert lines[3].endswith(
        "Bad_Name/SKILL.md: its name 'Bad_Name' is not lowercase kebab-case (letters, "
        "digits, single hyphens)"
    )
    assert lines[4].startswith("catalog: about ")
    assert lines[4].endswith("tokens a request; workspace skills: asked before first use")
    listed = json.loads(as_json.stdout)
    deploy, notes = listed["skills"]
    assert (deploy["name"], deploy["origin"], deploy["trusted"]) == ("deploy", "workspace", False)
    assert deploy["globs"] == ["ops/"]
    assert (notes["origin"], notes["trusted"]) == ("user", True)
    assert listed["invalid"][0]["origin"] == "workspace"
    assert listed["catalogTokens"] > 0
    assert [Path(s).name for s in listed["sources"]] == ["skills"] * 4


def test_tether_skills_without_skills_names_the_folders(home: Home, workspace: Path) -> None:
    daemon = start_daemon(home, workspace)
    try:
        shown = run_cli(home, "skills", "-w", str(workspace))
    finally:
        daemon.stop()
    assert shown.stdout.startswith("no skills (looked in ")
    assert ".tether/skills)" in shown.stdout
