"""The permission gate: whether a tool call may run, must ask a person, or is refused.

Order of the rules, first match wins:

    1. a deny rule (user config, or the workspace's own config)        -> deny
    2. mode `auto`                                                      -> allow
    3. something sensitive (always asks outside `auto`):
         a read of a credential-like file, an edit of a sensitive path,
         a command with shell operators or invisible/bidi characters    -> ask
    4. an ask rule                                                      -> ask
    5. an allow rule, or a session rule made by an "always allow" answer -> allow
    6. the mode: reads and bookkeeping never ask; `edits` lets edits run
       and asks for commands; `ask` asks for edits and commands          -> allow | ask

Rules are strings: `tool` (every call of that tool) or `tool(pattern)`, where the pattern is
matched against the command line for command tools and against the workspace-relative path for
edit tools; `*` matches any run of characters (`run_command(npm run build *)`).

Which settings may come from where is the caller's business (see `tether.daemon.config`):
the workspace's config can add deny and ask rules, never allow rules or the mode.
"""

import fnmatch
import re
import shlex
import unicodedata
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Literal

import msgspec

from tether.protocol.events import ApprovalKind, PermissionMode

Action = Literal["allow", "ask", "deny"]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    action: Action
    reason: str
    always_rule: str = ""
    """The session rule an "always allow" answer would add."""


class CallFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the gate needs to know about one call."""

    tool: str
    kind: Literal["read", "edit", "command", "other"]
    path: str = ""
    """Workspace-relative path for reads and edits, when the call names one."""
    command: str = ""

    @property
    def approval_kind(self) -> ApprovalKind:
        if self.kind == "other":
            return "tool"
        return self.kind


CREDENTIAL_NAMES = (
    ".env",
    ".env.*",
    "*.env",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    ".dockercfg",
    "credentials",
    "credentials.json",
    "secrets.*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
)
CREDENTIAL_DIRS = (".ssh", ".aws", ".gnupg", ".docker", ".kube")

SENSITIVE_DIRS = (".git", ".tether", ".github", ".gitlab", ".circleci", ".ci", ".husky")
SENSITIVE_NAMES = (
    "AGENTS.md",
    "CLAUDE.md",
    ".gitlab-ci.yml",
    ".travis.yml",
    "azure-pipelines.yml",
    "Jenkinsfile",
    ".pre-commit-config.yaml",
    ".gitattributes",
    ".gitmodules",
    # package manifests and build scripts: they run code at install or build time
    "package.json",
    "package-lock.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "uv.lock",
    "poetry.lock",
    "Pipfile",
    "Pipfile.lock",
    "tox.ini",
    "noxfile.py",
    "conftest.py",
    "Cargo.toml",
    "build.rs",
    "go.mod",
    "go.sum",
    "Gemfile",
    "*.gemspec",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "settings.gradle",
    "Makefile",
    "GNUmakefile",
    "CMakeLists.txt",
    "meson.build",
    "Dockerfile",
    "docker-compose.yml",
    "compose.yaml",
    "justfile",
    "Taskfile.yml",
    "build.sh",
    ".envrc",
)

SHELL_OPERATORS = re.compile(r"[;&|<>`]|\$\(")
# Zero-width, bidi controls and other invisible format characters can hide what a command does.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Co", "Cs"})

EXACT_ONLY_PROGRAMS = frozenset(
    {
        # interpreters and shells: any code at all
        "python", "python3", "python2", "py", "node", "deno", "bun", "ruby", "perl", "php",
        "lua", "bash", "sh", "zsh", "fish", "dash", "ksh", "pwsh", "powershell", "env",
        "xargs", "eval", "exec", "sudo", "doas", "su", "nohup", "timeout", "uv", "uvx", "npx",
        "pipx",
        # downloaders
        "curl", "wget", "scp", "rsync", "ssh", "nc", "ncat",
        # destructive
        "rm", "rmdir", "dd", "mkfs", "shred", "truncate", "chmod", "chown", "chgrp", "mv",
        "kill", "pkill", "killall", "reboot", "shutdown",
    }
)  # fmt: skip


def _matches_any(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def is_credential_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    return _matches_any(parts[-1], CREDENTIAL_NAMES) or any(p in CREDENTIAL_DIRS for p in parts)


def is_sensitive_edit(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    return any(p in SENSITIVE_DIRS for p in parts[:-1]) or _matches_any(parts[-1], SENSITIVE_NAMES)


def has_invisible_characters(text: str) -> bool:
    return any(
        unicodedata.category(ch) in _INVISIBLE_CATEGORIES or ch in "\u2028\u2029" for ch in text
    )


def command_risk(command: str) -> str:
    """Why a command must always ask, or "" when nothing about its text is alarming."""
    if has_invisible_characters(command):
        return "the command contains invisible or bidirectional-control characters"
    if SHELL_OPERATORS.search(command):
        return "the command uses shell operators (; & | < > $( ) or backticks)"
    if "\n" in command:
        return "the command spans several lines"
    return ""


def always_rule_for_command(tool: str, command: str) -> str:
    """The session rule an "always allow" answer adds: the program and its subcommand as a
    prefix, or, for interpreters, shells, downloaders and destructive programs, the exact
    command only."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if not words:
        return f"{tool}({command})"
    program = PurePosixPath(words[0]).name
    if program in EXACT_ONLY_PROGRAMS or command_risk(command):
        return f"{tool}({command})"
    prefix = [words[0]]
    for word in words[1:3]:
        if word.startswith("-") or any(c in word for c in "/.=:*?"):
            break
        prefix.append(word)
    joined = " ".join(prefix)
    if joined == command.strip():
        return f"{tool}({joined})"
    return f"{tool}({joined} *)"


def rule_matches(rule: str, facts: CallFacts) -> bool:
    tool, _, rest = rule.partition("(")
    if tool.strip() != facts.tool:
        return False
    if not rest:
        return True
    pattern = rest.removesuffix(")").strip()
    subject = facts.command if facts.kind == "command" else facts.path
    if fnmatch.fnmatchcase(subject, pattern):
        return True
    # `npm run build *` also allows plain `npm run build`.
    return pattern.endswith(" *") and subject == pattern[:-2]


class PermissionPolicy:
    def __init__(
        self,
        *,
        mode: PermissionMode = "edits",
        allow: Iterable[str] = (),
        ask: Iterable[str] = (),
        deny: Iterable[str] = (),
    ) -> None:
        self.mode: PermissionMode = mode
        self.allow = list(allow)
        self.ask = list(ask)
        self.deny = list(deny)
        self.session_rules: list[str] = []

    def decide(self, facts: CallFacts) -> Verdict:
        for rule in self.deny:
            if rule_matches(rule, facts):
                return Verdict(action="deny", reason=f"denied by the rule `{rule}`")
        if self.mode == "auto":
            return Verdict(action="allow", reason="mode auto")
        always = self._always_rule(facts)
        sensitive = self._sensitive(facts)
        if sensitive:
            return Verdict(action="ask", reason=sensitive, always_rule=always)
        for rule in self.ask:
            if rule_matches(rule, facts):
                return Verdict(action="ask", reason=f"the rule `{rule}` asks", always_rule=always)
        for rule in (*self.allow, *self.session_rules):
            if rule_matches(rule, facts):
                return Verdict(action="allow", reason=f"allowed by `{rule}`")
        if facts.kind in ("read", "other"):
            return Verdict(action="allow", reason="reads never ask")
        if facts.kind == "edit" and self.mode == "edits":
            return Verdict(action="allow", reason="mode edits")
        what = "edits" if facts.kind == "edit" else "commands"
        return Verdict(
            action="ask", reason=f"mode {self.mode}: {what} ask first", always_rule=always
        )

    def add_session_rule(self, rule: str) -> None:
        if rule and rule not in self.session_rules:
            self.session_rules.append(rule)

    @staticmethod
    def _sensitive(facts: CallFacts) -> str:
        if facts.kind == "read" and facts.path and is_credential_path(facts.path):
            return f"{facts.path} looks like a credentials file"
        if facts.kind == "edit" and facts.path and is_sensitive_edit(facts.path):
            return f"{facts.path} is a sensitive path (VCS, CI, agent or build configuration)"
        if facts.kind == "command":
            return command_risk(facts.command)
        return ""

    @staticmethod
    def _always_rule(facts: CallFacts) -> str:
        if facts.kind == "command":
            return always_rule_for_command(facts.tool, facts.command)
        if facts.path:
            return f"{facts.tool}({facts.path})"
        return facts.tool
