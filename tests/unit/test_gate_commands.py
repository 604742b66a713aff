"""The permission gate reads commands as bash runs them: hostile command lines ask or are
denied, deny rules see through spelling and wrappers, and "always" rules allow exactly what
was shown."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.daemon.sessions.approvals import call_facts
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.run_command import RunCommand
from tether.daemon.turn.command_line import analyse
from tether.daemon.turn.permissions import (
    CallFacts,
    PermissionPolicy,
    always_rule_for_command,
    command_risk,
)


def cmd(command: str) -> CallFacts:
    return CallFacts(tool="run_command", kind="command", command=command)


BROAD_ALLOW = [
    f"run_command({pattern})"
    for pattern in (
        "npm run build *", "git status *", "ls *", "echo *", "cat *", "cd *", "find *",
        "xargs *", "printf *", "grep *", "true", "env *", "command *", "test *",
    )
]  # fmt: skip
"""Allow rules a user might well have: none of them allows creating a file."""

HOSTILE = [
    # other shells' syntax: zsh's =(…) and glob qualifiers, fish's (…)
    "npm run build =(touch x)",
    "npm run build *(e:'touch x':)",
    "npm run build (touch x)",
    # substitutions and expansions that run code
    "npm run build $(touch x)",
    "npm run build `touch x`",
    "npm run build <(touch x)",
    'echo "$(touch x)"',
    "echo ${X:-$(touch x)}",
    "echo $((a[$(touch x)]))",
    "cat <<EOF\n$(touch x)\nEOF",
    # output outside the workspace
    "npm run build > /tmp/x",
    "npm run build > ../x",
    "echo x > ~/.bashrc",
    "cd .. && echo x > f",
    "cd / && ls > etc/x",
    "ls 2> $OUT",
    # output to files an edit of which would ask
    "echo 'touch x' > .git/hooks/pre-commit",
    "cd .git && echo 'touch x' > hooks/post-checkout",
    "cd .git/hooks; echo 'touch x' >> pre-push",
    'echo \'"postinstall": "touch x"\' > package.json',
    "echo 'all:; touch x' >> sub/Makefile",
    "echo x > .env",
    "ls > .tether/skills/evil/SKILL.md",
    # code fed to an interpreter
    "echo 'touch x' | sh",
    "cat script | bash",
    "cat <<EOF | python3\nopen('x', 'w')\nEOF",
    "sh <<'EOF'\ntouch x\nEOF",
    "python3 < evil.py",
    "ls && python3 < evil.py",
    # shells and evaluators running a string
    "bash -c 'touch x'",
    "sh -c 'ls; touch x'",
    'bash -lc "$(echo touch) x"',
    "eval touch x",
    "eval 'ls; touch x'",
    "command eval 'touch x'",
    "zsh -c 'ls'",
    "fish -c 'ls'",
    # programs that run other programs
    "xargs touch < list",
    "find . -exec touch x \\;",
    "find . -execdir sh -c 'touch x' \\;",
    "env touch x",
    "env -i touch x",
    "env -S 'touch x'",
    "exec touch x",
    "time touch x",
    "nohup touch x",
    # the environment and the shell's state
    "X=1 npm run build",
    "LD_PRELOAD=./evil.so ls",
    "PATH=.:$PATH ls",
    "export PATH=.; ls",
    "a=(x); ls",
    "source evil.sh",
    ". evil.sh",
    "trap 'touch x' EXIT; ls",
    "shopt -s extglob; ls",
    "printf -v 'a[$(touch x)]' 1",
    "test -v 'a[$(touch x)]'",
    "[[ -v a[$(touch x)] ]]",
    "$CMD x",
    "${CMD} x",
    "f() { touch x; }; f",
    "(touch x)",
    "{ touch x; }",
    "if true; then touch x; fi",
    "for f in a; do touch $f; done",
    "ls &",
    "ls & touch x",
    "! touch x",
    "time { touch x; }",
    "time -p ! touch x",
    "nohup { touch x; }",
    # a sequence of which one part is not allowed
    "ls; touch x",
    "ls && touch x",
    "ls || touch x",
    "ls | tee x",
    "ls\ntouch x",
    # where tree-sitter-bash and bash read a line differently
    "to\\\nuch x",
    "cat <<EOF\n  EOF\ntouch x\nEOF",
    # what bash accepts and the gate cannot parse
    "ls 3<>rw",
    "ls )",
    # hidden characters
    "ls\x1b[2K\rtouch x",
]


@pytest.mark.parametrize("command", HOSTILE)
def test_hostile_commands_ask_under_broad_allow_rules(command: str) -> None:
    policy = PermissionPolicy(mode="edits", allow=BROAD_ALLOW)
    verdict = policy.decide(cmd(command))
    assert verdict.action == "ask", verdict.reason


def test_a_redirection_is_judged_from_the_folder_the_command_runs_in() -> None:
    policy = PermissionPolicy(mode="edits", allow=BROAD_ALLOW)
    in_git = CallFacts(
        tool="run_command", kind="command", command="echo x > hooks/pre-commit", cwd=".git"
    )
    verdict = policy.decide(in_git)
    assert verdict.action == "ask"
    assert ".git/hooks/pre-commit" in verdict.reason
    elsewhere = CallFacts(
        tool="run_command", kind="command", command="echo x > hooks/pre-commit", cwd="src"
    )
    assert policy.decide(elsewhere).action == "allow"


@pytest.mark.parametrize(
    "command",
    ["npm run build --prod", "git status -s && ls -la src", "ls | grep x", "echo 'a; b'",
     "cat a.txt > out.txt", "cd sub && ls > listing.txt", "ls 2>&1 >/dev/null",
     "grep -rn 'x' src | cat", "echo $HOME", "ls src/*.py", "cat <<'EOF' > notes.txt\n$x\nEOF",
     "git status # then push", "ls\nls -la"],
)  # fmt: skip
def test_plain_commands_are_judged_by_every_command_they_run(command: str) -> None:
    assert command_risk(command) == ""
    assert PermissionPolicy(mode="edits", allow=BROAD_ALLOW).decide(cmd(command)).action == (
        "allow"
    )
    # One rule short, it asks.
    assert PermissionPolicy(mode="edits").decide(cmd(command)).action == "ask"


@pytest.mark.parametrize(
    "command",
    ["git  push", "git push origin main", "git -C . push", "git -C sub push --force",
     "git --no-pager -c a.b=c push", "git --git-dir=.git --work-tree=. push",
     "command git push", "builtin command git push", "GIT_TRACE=0 git push",
     "/usr/bin/git push", "\\git push", "'git' push", 'g"it" pu\\sh', "env git push",
     "env -i HOME=/ git push", "timeout 5 git push", "timeout -s KILL 5 git push",
     "nice -n 5 git push", "sudo -u me git push", "nohup git push", "time git push",
     "exec git push", "ls && git push", "ls; git push", "ls | git push", "ls\ngit push",
     "bash -c 'git push'", "sh -c \"ls && git push origin\"", "eval git push",
     "eval 'git push'", "echo $(git push)", "echo `git push`", "xargs git push < refs",
     "find . -exec git push \\;", "(git push)", "{ git push; }", "if true; then git push; fi",
     "zsh -c 'git push'", "git push =(x)", "bash -c -- 'git push'", "command -p git push",
     "command -- eval git push", "time -p git push"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["auto", "edits"])
def test_deny_rules_match_words_through_spelling_and_wrappers(command: str, mode: str) -> None:
    policy = PermissionPolicy(
        mode=mode,  # type: ignore[arg-type]
        allow=["run_command", "run_command(*)"],
        deny=["run_command(git push *)"],
    )
    verdict = policy.decide(cmd(command))
    assert verdict.action == "deny", verdict.reason


@pytest.mark.parametrize("command", ["git status", "git log --grep push", "echo git push"])
def test_deny_rules_leave_other_commands_alone(command: str) -> None:
    policy = PermissionPolicy(mode="auto", deny=["run_command(git push *)"])
    assert policy.decide(cmd(command)).action == "allow"


def test_an_ask_rule_matching_one_command_of_a_line_asks() -> None:
    policy = PermissionPolicy(allow=["run_command(npm *)"], ask=["run_command(npm publish *)"])
    assert policy.decide(cmd("npm run build && npm  publish")).action == "ask"
    assert policy.decide(cmd("npm run build")).action == "allow"


ROUND_TRIP = [
    ("npm run build --prod", "run_command(npm run build *)"),
    ("npm run build", "run_command(npm run build)"),
    ("git status -s", "run_command(git status *)"),
    ("git -C sub status", "run_command(git -C sub status)"),
    ("git -c alias.x='!touch x' x", "run_command(git -c 'alias.x=!touch x' x)"),
    ("python3.12 -c 'print(1)'", "run_command(python3.12 -c 'print(1)')"),
    ("python3 -c 'a; b'", "run_command(python3 -c 'a; b')"),
    ("sed -n 1p f", "run_command(sed -n 1p f)"),
    ("find . -name x", "run_command(find . -name x)"),
    ("find . -name '*.py'", "run_command(find . -name '*.py')"),
    ("awk '{print $1}' f", "run_command(awk '{print $1}' f)"),
    ("node -e 'x()'", "run_command(node -e 'x()')"),
    ("pytest tests/unit -q", "run_command(pytest tests/unit -q)"),
    ('grep -rn "a b" src', "run_command(grep -rn 'a b' src)"),
    ("echo 'it'\"'\"'s'", "run_command(echo 'it'\"'\"'s')"),
    ("npm test -- --grep 'a b'", "run_command(npm test *)"),
    ("git  log   --oneline", "run_command(git log *)"),
    ("command git status", "run_command(git status)"),
    ("bash -c 'git status -s'", "run_command(git status *)"),
    ("rm -rf build", "run_command(rm -rf build)"),
    ("ls -la", "run_command(ls -la)"),
    ("echo $(date)", "run_command(echo $(date))"),
    ("cat a | grep b", "run_command(cat a | grep b)"),
    ("X=1 make", "run_command(X=1 make)"),
    ("git status *.py", "run_command(git status *)"),
]


@pytest.mark.parametrize(("command", "rule"), ROUND_TRIP)
def test_an_always_rule_is_what_was_shown_and_allows_that_command(command: str, rule: str) -> None:
    assert always_rule_for_command("run_command", command) == rule
    policy = PermissionPolicy(mode="edits")
    verdict = policy.decide(cmd(command))
    assert verdict.action == "ask"
    assert verdict.always_rule == rule
    policy.session_rules.append(verdict.always_rule)
    assert policy.decide(cmd(command)).action == "allow"


@pytest.mark.parametrize("command", ["ls src/*.py", "echo $HOME", "cat ~/notes"])
def test_no_always_rule_is_offered_where_no_rule_could_name_only_what_was_shown(
    command: str,
) -> None:
    assert always_rule_for_command("run_command", command) == ""


@pytest.mark.parametrize(
    ("approved", "other"),
    [
        ("git -C sub status", "git -c alias.x='!touch x' x"),
        ("git -C sub status", "git -C / status"),
        ("python3.12 -c 'print(1)'", "python3.12 -c 'import os'"),
        ("sed -n 1p f", "sed -i s/a/b/ f"),
        ("find . -name x", "find / -delete"),
        ("awk '{print $1}' f", "awk 'BEGIN{system(\"touch x\")}'"),
        ("find . -name '*.py'", "find . -name x.py"),
        ("npm run build --prod", "npm run build; touch x"),
        ("npm run build --prod", "npm run build $(touch x)"),
        ("env", "env touch x"),
        ("xargs -n1 echo", "xargs -n1 touch"),
        ("ls -la", "ls -la /"),
    ],
)
def test_an_always_rule_allows_nothing_beyond_what_was_shown(approved: str, other: str) -> None:
    policy = PermissionPolicy(mode="edits")
    policy.session_rules.append(policy.decide(cmd(approved)).always_rule)
    assert policy.decide(cmd(approved)).action == "allow"
    assert policy.decide(cmd(other)).action == "ask"


def test_a_rule_star_stands_for_globs_and_variables_a_literal_word_does_not() -> None:
    policy = PermissionPolicy(
        mode="edits", allow=["run_command(pytest *)", "run_command(rm *.tmp)"]
    )
    assert policy.decide(cmd("pytest tests/*.py -k $K")).action == "allow"
    assert policy.decide(cmd("rm a.tmp")).action == "allow"
    assert policy.decide(cmd("rm b*.tmp")).action == "ask"  # the glob may expand to anything


def test_a_quoted_star_in_a_rule_matches_only_a_star() -> None:
    policy = PermissionPolicy(mode="edits", allow=["run_command(find . -name '*.py')"])
    assert policy.decide(cmd("find . -name '*.py'")).action == "allow"
    assert policy.decide(cmd("find . -name x.py")).action == "ask"


def test_a_rule_naming_a_command_that_is_not_plain_exactly_allows_it() -> None:
    policy = PermissionPolicy(mode="edits", allow=["run_command(echo $(date) > /tmp/d)"])
    assert policy.decide(cmd("echo $(date) > /tmp/d")).action == "allow"
    assert policy.decide(cmd("echo $(date) > /tmp/e")).action == "ask"
    # A pattern is not an exact name: it never lets such a command through.
    broad = PermissionPolicy(mode="edits", allow=["run_command", "run_command(*)"])
    assert broad.decide(cmd("echo $(date) > /tmp/d")).action == "ask"


@pytest.mark.parametrize(
    ("command", "action"),
    [("ls -la src", "allow"), ("npm run build --prod", "allow"), ("ls =(touch x)", "ask"),
     ("ls *.py", "ask"), ("ls ~", "ask"), ("ls (touch x)", "ask"), ("ls 'a b'", "ask"),
     ("ls $x", "ask"), ("ls =ls", "ask")],
)  # fmt: skip
def test_the_users_own_shell_makes_every_command_beyond_plain_words_ask(
    command: str, action: str
) -> None:
    policy = PermissionPolicy(
        mode="edits", allow=["run_command(ls *)", "run_command(npm run build *)"], user_shell=True
    )
    assert policy.decide(cmd(command)).action == action


def test_bash_c_is_judged_as_what_it_runs() -> None:
    policy = PermissionPolicy(mode="edits", allow=["run_command(git status *)"])
    assert policy.decide(cmd("bash -c 'git status -s'")).action == "allow"
    assert policy.decide(cmd("sh -c 'git status; touch x'")).action == "ask"
    assert policy.decide(cmd("bash -c ''")).action == "ask"


def test_words_are_read_as_bash_reads_them() -> None:
    line = analyse("git -C 'my dir' commit -m \"a \\\"b\\\" c\" x\\ y {} ~/z $v 'a*'")
    (command,) = line.commands
    assert command.words == ("git", "-C", "my dir", "commit", "-m", 'a "b" c', "x y", "{}",
                             None, None, "a*")  # fmt: skip
    assert command.normal[:4] == ("git", "commit", "-m", 'a "b" c')


def test_the_daemon_starts_without_the_parser() -> None:
    """tree-sitter costs tens of milliseconds to import: it loads with the first command."""
    code = (
        "import sys, tether.daemon.server.daemon, tether.daemon.turn.permissions\n"
        "print(sorted(m for m in sys.modules if m.startswith('tree_sitter')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_the_gate_learns_the_folder_a_command_runs_in(tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "hooks").symlink_to(tmp_path / ".git" / "hooks")
    registry = ToolRegistry([RunCommand()])
    policy = PermissionPolicy(mode="edits", allow=BROAD_ALLOW)
    for cwd in (".git", "hooks/.."):
        args = {"command": "echo x > hooks/pre-commit", "description": "d", "cwd": cwd}
        params = registry.validate("run_command", json.dumps(args))
        assert not isinstance(params, str), params
        facts = call_facts(registry, tmp_path, "run_command", params)
        assert policy.decide(facts).action == "ask", cwd


@pytest.mark.parametrize(
    "command",
    ["echo " + "$(" * 3000 + "x" + ")" * 3000, "(" * 3000 + "x" + ")" * 3000,
     "bash -c " + "'eval " * 50 + "x" + "'" * 50, "git " + "a " * 20000],
)  # fmt: skip
def test_deep_or_long_lines_are_judged_without_failing(command: str) -> None:
    policy = PermissionPolicy(mode="edits", allow=["run_command(git a *)"], deny=["run_command(x)"])
    verdict = policy.decide(cmd(command))
    assert verdict.action in ("ask", "allow")
    assert (verdict.action == "allow") == command.startswith("git a")
