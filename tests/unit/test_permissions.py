"""The permission gate's decisions, rule by rule."""

import pytest

from tether.daemon.turn.permissions import (
    CallFacts,
    PermissionPolicy,
    always_rule_for_command,
    command_risk,
    is_credential_path,
    is_sensitive_edit,
)


def cmd(command: str) -> CallFacts:
    return CallFacts(tool="run_command", kind="command", command=command)


def edit(path: str) -> CallFacts:
    return CallFacts(tool="edit_file", kind="edit", path=path)


def read(path: str) -> CallFacts:
    return CallFacts(tool="read_file", kind="read", path=path)


@pytest.mark.parametrize(
    ("mode", "facts", "action"),
    [
        ("edits", read("src/app.py"), "allow"),
        ("edits", edit("src/app.py"), "allow"),
        ("edits", cmd("pytest -q"), "ask"),
        ("ask", edit("src/app.py"), "ask"),
        ("ask", cmd("ls"), "ask"),
        ("ask", read("src/app.py"), "allow"),
        ("auto", cmd("rm -rf build"), "allow"),
        ("auto", read(".env"), "allow"),
        ("auto", edit(".git/config"), "allow"),
    ],
)
def test_modes(mode: str, facts: CallFacts, action: str) -> None:
    policy = PermissionPolicy(mode=mode)  # type: ignore[arg-type]
    assert policy.decide(facts).action == action


@pytest.mark.parametrize(
    "path",
    [".env", ".env.local", "config/.env.production", ".netrc", ".npmrc", ".pypirc",
     "keys/server.pem", "id_rsa", "home/.ssh/config", "deploy/tls.key"],
)  # fmt: skip
def test_credential_reads_always_ask_outside_auto(path: str) -> None:
    assert is_credential_path(path)
    verdict = PermissionPolicy(mode="edits", allow=["read_file"]).decide(read(path))
    assert verdict.action == "ask"
    assert "credentials" in verdict.reason


@pytest.mark.parametrize(
    "path",
    [".git/config", ".github/workflows/ci.yml", ".tether/config.toml", "AGENTS.md",
     "package.json", "pyproject.toml", "setup.py", "Makefile", "sub/Cargo.toml", ".gitlab-ci.yml",
     "requirements-dev.txt"],
)  # fmt: skip
def test_sensitive_edits_always_ask_outside_auto(path: str) -> None:
    assert is_sensitive_edit(path)
    verdict = PermissionPolicy(mode="edits", allow=["edit_file"]).decide(edit(path))
    assert verdict.action == "ask"


def test_ordinary_paths_are_not_sensitive() -> None:
    assert not is_credential_path("src/environment.py")
    assert not is_credential_path("docs/keys.md")
    assert not is_sensitive_edit("src/package_json.py")
    assert not is_sensitive_edit("README.md")


@pytest.mark.parametrize(
    "command",
    ["cat a | sh", "echo $(whoami)", "echo `id`", "make > /tmp/out", "X=1 make",
     "sleep 1 &", "ls\u200b -la", "echo \u202eevil", "(ls)"],
)  # fmt: skip
def test_risky_commands_always_ask(command: str) -> None:
    assert command_risk(command)
    policy = PermissionPolicy(mode="edits", allow=["run_command"])
    policy.session_rules.append("run_command")
    assert policy.decide(cmd(command)).action == "ask"


def test_deny_wins_over_allow_and_auto() -> None:
    policy = PermissionPolicy(
        mode="auto", allow=["run_command(git *)"], deny=["run_command(git push *)"]
    )
    assert policy.decide(cmd("git push origin main")).action == "deny"
    assert policy.decide(cmd("git status")).action == "allow"


def test_allow_and_ask_rules_with_patterns() -> None:
    policy = PermissionPolicy(
        mode="edits",
        allow=["run_command(git status)", "run_command(npm run build *)"],
        ask=["edit_file(src/secret/*)"],
    )
    assert policy.decide(cmd("git status")).action == "allow"
    assert policy.decide(cmd("git status --short")).action == "ask"
    assert policy.decide(cmd("npm run build")).action == "allow"
    assert policy.decide(cmd("npm run build --prod")).action == "allow"
    assert policy.decide(cmd("npm run test")).action == "ask"
    assert policy.decide(edit("src/secret/x.py")).action == "ask"
    assert policy.decide(edit("src/open/x.py")).action == "allow"


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("npm run build", "run_command(npm run build)"),
        ("npm run build --prod", "run_command(npm run build *)"),
        ("git status -s", "run_command(git status *)"),
        ("pytest tests/unit -q", "run_command(pytest tests/unit -q)"),
        ("python manage.py migrate", "run_command(python manage.py migrate)"),
        ("bash build.sh", "run_command(bash build.sh)"),
        ("curl https://example.com", "run_command(curl https://example.com)"),
        ("rm -rf build", "run_command(rm -rf build)"),
    ],
)
def test_always_allow_becomes_a_prefix_or_exact_rule(command: str, rule: str) -> None:
    assert always_rule_for_command("run_command", command) == rule


def test_session_rule_allows_the_same_family_only() -> None:
    policy = PermissionPolicy(mode="edits")
    verdict = policy.decide(cmd("npm run build --prod"))
    assert verdict.action == "ask"
    policy.session_rules.append(verdict.always_rule)
    assert policy.decide(cmd("npm run build --dev")).action == "allow"
    assert policy.decide(cmd("npm run lint")).action == "ask"
    exact = policy.decide(cmd("rm -rf build"))
    policy.session_rules.append(exact.always_rule)
    assert policy.decide(cmd("rm -rf build")).action == "allow"
    assert policy.decide(cmd("rm -rf /")).action == "ask"


HIDING_COMMANDS = [
    "echo ok\x1b[2K\rrm -rf ~",  # ESC sequence erasing the line, then a carriage return
    "git status\rrm -rf ~",
    "ls\x07",
    "ls \x1b[8mrm -rf ~\x1b[0m",  # concealed text
    "ls\x00",
    "ls \x7f",
    "ls \x9b2K",  # the 8-bit CSI
    "echo \u202eevil",  # bidi override
    "ls\u200b -la",  # zero-width space
    "ls\u2028rm x",
]


@pytest.mark.parametrize("command", HIDING_COMMANDS)
@pytest.mark.parametrize("mode", ["auto", "edits", "ask"])
def test_hidden_characters_in_a_command_always_ask(command: str, mode: str) -> None:
    policy = PermissionPolicy(
        mode=mode,  # type: ignore[arg-type]
        allow=["run_command", f"run_command({command})", "run_command(*)"],
    )
    policy.session_rules.append(f"run_command({command})")
    verdict = policy.decide(cmd(command))
    assert verdict.action == "ask"
    assert "control or invisible characters" in verdict.reason
    assert verdict.always_rule == ""  # no answer can turn it into a rule


def test_the_reason_names_the_hidden_characters() -> None:
    reason = PermissionPolicy().decide(cmd("echo ok\x1b[2K\rrm -rf ~\x07")).reason
    assert "U+001B, U+000D, U+0007" in reason
    assert "\x1b" not in reason


def test_deny_still_wins_over_hidden_characters() -> None:
    policy = PermissionPolicy(mode="auto", deny=["run_command(rm *)"])
    assert policy.decide(cmd("rm -rf ~\x1b[2K")).action == "deny"


@pytest.mark.parametrize("command", ["printf 'a\\tb'", "echo\ttabbed", "ls -la"])
def test_tabs_and_plain_text_are_not_hidden_characters(command: str) -> None:
    assert PermissionPolicy(mode="auto").decide(cmd(command)).action == "allow"
    assert PermissionPolicy(allow=["run_command"]).decide(cmd(command)).action == "allow"


def test_a_multiline_command_is_judged_line_by_line() -> None:
    # A newline separates commands like `;`: every command of every line must be allowed.
    assert PermissionPolicy(mode="auto").decide(cmd("git log\nls")).action == "allow"
    assert PermissionPolicy(allow=["run_command"]).decide(cmd("git log\nls")).action == "allow"
    git_only = PermissionPolicy(allow=["run_command(git log *)"])
    assert git_only.decide(cmd("git log\nls")).action == "ask"
