"""The user's settings take effect without restarting the daemon: the shell's TETHER_* variables
and config file edits reach the model server at the next turn, a session's own model wins over
both, a bad config file is reported with its line and setting, and `tether daemon
status|restart` say and apply what the daemon uses. The real CLI and the daemon it starts."""

import json
from pathlib import Path

from tests.support import Home, cli
from tether.testing import ModelServer

LOOP = {"steps": [{"text": "ok"}], "loop": True}


def config_file(home: Home) -> Path:
    path = home.root / "config" / "tether" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def models_asked(server: ModelServer) -> list[str]:
    return [str(request["model"]) for request in server.requests]


def run(home: Home, workspace: Path, *args: str) -> str:
    """`tether run` that must succeed; its stdout."""
    done = cli(home, "-w", str(workspace), "run", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def status(home: Home, workspace: Path) -> dict[str, object]:
    done = cli(home, "-w", str(workspace), "daemon", "status", "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout)
    return found


def stop(home: Home, workspace: Path) -> None:
    done = cli(home, "-w", str(workspace), "daemon", "stop")
    assert done.returncode == 0, done.stderr


def test_the_shell_s_variables_and_config_edits_reach_the_model_server_without_a_restart(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(LOOP)
    try:
        home.env["TETHER_MODEL"] = "first"
        run(home, workspace, "hi")
        pid = status(home, workspace)["pid"]
        home.env["TETHER_MODEL"] = "second"
        run(home, workspace, "hi")
        # Unset in the shell: the config file decides, read again at every turn.
        del home.env["TETHER_MODEL"]
        config_file(home).write_text('[provider]\nmodel = "from-file"\n')
        run(home, workspace, "hi")
        config_file(home).write_text('[provider]\nmodel = "edited"\n')
        run(home, workspace, "hi")
        assert models_asked(model_server) == ["first", "second", "from-file", "edited"]
        shown = status(home, workspace)
        assert shown["pid"] == pid, "the daemon was restarted"
        assert (shown["model"], shown["modelFrom"]) == ("edited", "file")
        assert shown["configFile"] == str(config_file(home))
        home.env["TETHER_MODEL"] = "shell"
        shown = status(home, workspace)
        assert (shown["model"], shown["modelFrom"]) == ("shell", "client")
    finally:
        stop(home, workspace)


def test_a_session_s_own_model_wins_over_the_shell_and_is_listed(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(LOOP)
    try:
        home.env["TETHER_MODEL"] = "shell"
        run(home, workspace, "--model", "chosen", "hi")
        listed = cli(home, "-w", str(workspace), "sessions", "--json")
        [session] = json.loads(listed.stdout)
        assert (session["model"], session.get("state", "idle")) == ("chosen", "idle")
        home.env["TETHER_MODEL"] = "other-shell"
        run(home, workspace, "--session", session["id"], "again")
        run(home, workspace, "a new session")
        assert models_asked(model_server) == ["chosen", "chosen", "other-shell"]
        table = cli(home, "-w", str(workspace), "sessions").stdout
        assert any(session["id"] in line and "chosen" in line for line in table.splitlines())
        shown = status(home, workspace)
        assert shown["sessionModels"] == [{"sessionId": session["id"], "model": "chosen"}]
        words = cli(home, "-w", str(workspace), "daemon", "status").stdout
        assert f"session {session['id']} calls chosen" in words
        assert "model     other-shell (TETHER_MODEL of this shell)" in words
    finally:
        stop(home, workspace)


def test_tether_models_marks_the_model_in_use(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script({"model": "served", "steps": [{"text": "ok"}]})
    try:
        home.env["TETHER_MODEL"] = "served"
        listed = cli(home, "-w", str(workspace), "models")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines() == ["* served"]
        home.env["TETHER_MODEL"] = "elsewhere"
        listed = cli(home, "-w", str(workspace), "models")
        assert listed.stdout.splitlines() == [
            "  served",
            "* elsewhere (in use, but the server does not list it)",
        ]
    finally:
        stop(home, workspace)


def test_a_bad_config_file_is_reported_with_its_line_and_setting(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(LOOP)
    del home.env["TETHER_MODEL"]
    path = config_file(home)
    path.write_text('[provider]\nmodel = "m"\nmodle = "typo"\n')
    refused = cli(home, "-w", str(workspace), "run", "hi")
    assert refused.returncode == 2
    reason = f"{path}, line 3: provider.modle: unknown setting; provider takes kind, base_url,"
    assert reason in refused.stderr
    assert "see " not in refused.stderr, "the reason is all there is to say"
    log = home.stderr_path(workspace)
    assert log.read_text().count("bad config") == 1
    try:
        path.write_text('[provider]\nmodel = "m"\n')
        run(home, workspace, "hi")
        # Broken while the daemon runs: the turn fails saying why, and nothing else changes.
        path.write_text('[provider]\nmodel = "m"\nmax_output_tokens = "many"\n')
        failed = cli(home, "-w", str(workspace), "run", "hi")
        assert failed.returncode == 1
        assert f"{path}, line 3: provider.max_output_tokens: Expected `int`" in failed.stderr
        shown = status(home, workspace)
        assert f"{path}, line 3" in str(shown["configError"])
        assert "then run it again (no session was kept)" in failed.stderr
        listed = cli(home, "-w", str(workspace), "sessions", "--json")
        # The session made for the prompt the model never saw is not kept. (The wire leaves
        # out a field at its default: `idle`.)
        states = [s.get("state", "idle") for s in json.loads(listed.stdout)]
        assert states == ["idle"]
        path.write_text('[provider]\nmodel = "fixed"\n')
        run(home, workspace, "hi")
        assert models_asked(model_server) == ["m", "fixed"]
        assert "configError" not in status(home, workspace)
    finally:
        stop(home, workspace)
    said = log.read_text().splitlines()
    assert said.count(next(line for line in said if "bad config" in line)) == 1
    lines = home.log_path(workspace).read_text().splitlines()
    served = [line for line in lines if '"msg":"daemon started"' in line]
    assert len(served) == 1, "one start, logged once"
    assert len(lines) == len(set(lines)), "no line is logged twice"
    assert not set(lines) & set(said), "the log is not echoed to stderr"


def test_restart_applies_what_only_a_start_reads_and_keeps_the_sessions(
    home: Home, workspace: Path, model_server: ModelServer
) -> None:
    model_server.set_script(LOOP)
    try:
        run(home, workspace, "hi")
        before = status(home, workspace)
        assert "restartNeeded" not in before
        config_file(home).write_text("idle_timeout = 120\n")
        shown = status(home, workspace)
        assert shown["restartNeeded"] == ["idle_timeout"]
        assert shown["idleTimeout"] == before["idleTimeout"]
        words = cli(home, "-w", str(workspace), "daemon", "status").stdout
        assert "changed since the daemon started: idle_timeout" in words
        assert "tether daemon restart" in words
        restarted = cli(home, "-w", str(workspace), "daemon", "restart")
        assert restarted.returncode == 0, restarted.stderr
        assert f"tether daemon stopped (pid {before['pid']})" in restarted.stdout
        after = status(home, workspace)
        assert after["pid"] != before["pid"]
        assert after["idleTimeout"] == 120
        assert "restartNeeded" not in after
        listed = cli(home, "-w", str(workspace), "sessions", "--json")
        assert len(json.loads(listed.stdout)) == 1, "the session survived the restart"
    finally:
        stop(home, workspace)
