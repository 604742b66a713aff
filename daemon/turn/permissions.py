"""The permission gate: whether a tool call may run, must ask a person, or is refused.

Order of the rules, first match wins:

    1. a deny rule (user config, or the workspace's own config)        -> deny
    2. a call that uses what the user has not trusted yet (a workspace's
       skill, before the user trusted the workspace's skills)           -> ask
    3. a command with hidden characters (control characters other than
       tab and newline, bidi controls, zero-width and other invisible
       characters): what a person is shown is not what would run, so
       neither a mode nor a rule may let it through                     -> ask
    4. an edit inside a skill folder (`.tether/skills/`, `.claude/skills/`,
       `.agents/skills/`, the user's own when it is in the workspace), or
       a command that names one: a skill is instructions the agent will
       follow later, so it asks in every mode unless an allow rule or
       the session's "always" rule names the call                     -> ask
    5. mode `auto`                                                      -> allow
    6. something sensitive (always asks outside `auto`):
         a read that names a credential-like file (its path, or the glob
         a search selects files by), an edit of a sensitive path,
         a command with shell operators or several lines (not when it
         runs in the sandbox in mode `edits`: see 9)                   -> ask
    7. an ask rule                                                      -> ask
    8. an allow rule, or a session rule made by an "always allow" answer -> allow
    9. the mode: reads and bookkeeping never ask (a call to a program outside
       tether, an MCP server's tool, asks); `edits` lets edits run and
       asks for commands, except commands that run in the command sandbox
       (`sandboxed`, like Codex's workspace-write policy: what they can
       change is the workspace); `ask` asks for edits and commands      -> allow | ask

Searches (grep, glob) leave credential-like files out of what they read and list unless the
call names them (`names_credentials`, the same test the gate applies), so a search over the
whole workspace never reads a secret without a person being asked.

Rules are strings: `tool` (every call of that tool) or `tool(pattern)`, where the pattern is
matched against the command line for command tools and against the workspace-relative path for
edit tools; `*` matches any run of characters (`run_command(npm run build *)`). An MCP tool
rule may name many tools with `*` in the tool's name: `mcp__github__*` is every tool of the
server `github`.

Which settings may come from where is the caller's business (see `tether.daemon.config.settings`):
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

from tether.daemon.skills.library import WORKSPACE_FOLDERS
from tether.daemon.tools.credentials import (
    glob_names_credentials,
    is_credential_path,
)
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
    glob: str = ""
    """The file glob a search selects files by (grep's `glob`, glob's `pattern`), if any."""
    command: str = ""
    trust: str = ""
    """What the call needs the user to trust first ("" when nothing; see `TrustGated`)."""
    external: str = ""
    """The program outside tether the call goes to ("MCP server github"; see `ExternalTool`)."""
    sandboxed: bool = False
    """The call's programs run in the command sandbox when it is on (see `SandboxedTool`)."""

    @property
    def approval_kind(self) -> ApprovalKind:
        if self.kind == "other":
            return "tool"
        return self.kind


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
# Control characters (escape sequences, carriage returns, …), bidi controls, zero-width and
# other format characters can hide or reorder what a terminal shows of a command.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
_SHOWN_CONTROLS = frozenset("\t\n")

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


def is_sensitive_edit(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    return any(p in SENSITIVE_DIRS for p in parts[:-1]) or _matches_any(parts[-1], SENSITIVE_NAMES)


def hidden_characters(text: str) -> list[str]:
    """The characters in `text` that a terminal would not show as themselves (control
    characters other than tab and newline, bidi controls, zero-width and other format
    characters, line and paragraph separators), as `U+XXXX`, each once, in order."""
    found: list[str] = []
    for ch in text:
        if ch.isprintable() or ch in _SHOWN_CONTROLS:
            continue
        if unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            code = f"U+{ord(ch):04X}"
            if code not in found:
                found.append(code)
    return found


def hidden_character_risk(command: str) -> str:
    """Why a command must ask whatever the mode and rules say, or ""."""
    hidden = hidden_characters(command)
    if not hidden:
        return ""
    shown = ", ".join(hidden[:5]) + (", …" if len(hidden) > 5 else "")
    return (
        f"the command contains control or invisible characters ({shown}) that a terminal "
        "would not show as typed"
    )


def command_risk(command: str) -> str:
    """Why a command must always ask, or "" when nothing about its text is alarming."""
    if hidden := hidden_character_risk(command):
        return hidden
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
    named = tool.strip()
    if named != facts.tool and not (
        named.startswith("mcp__") and fnmatch.fnmatchcase(facts.tool, named)
    ):
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
        protected: Iterable[str] = WORKSPACE_FOLDERS,
        sandbox: bool = False,
    ) -> None:
        """`protected`: workspace-relative folders that edits (and commands naming them) may
        not change without asking, in any mode (the skill folders). `sandbox`: the command
        sandbox is on, so sandboxed commands run without asking in mode `edits`."""
        self.mode: PermissionMode = mode
        self.sandbox = sandbox
        self.protected = tuple(folder.rstrip("/") for folder in protected)
        self.allow = list(allow)
        self.ask = list(ask)
        self.deny = list(deny)
        self.session_rules: list[str] = []

    def decide(self, facts: CallFacts) -> Verdict:
        for rule in self.deny:
            if rule_matches(rule, facts):
                return Verdict(action="deny", reason=f"denied by the rule `{rule}`")
        if facts.trust:
            return Verdict(action="ask", reason=facts.trust)
        always = self._always_rule(facts)
        if facts.kind == "command" and (hidden := hidden_character_risk(facts.command)):
            return Verdict(action="ask", reason=hidden)  # no rule may allow it later
        protected = self._protected(facts)
        if protected and not any(
            rule_matches(rule, facts) for rule in (*self.allow, *self.session_rules)
        ):
            return Verdict(action="ask", reason=protected, always_rule=always)
        if self.mode == "auto":
            return Verdict(action="allow", reason="mode auto")
        confined = (
            self.sandbox and facts.kind == "command" and facts.sandboxed and self.mode == "edits"
        )
        sensitive = "" if confined else self._sensitive(facts)
        if sensitive:
            return Verdict(action="ask", reason=sensitive, always_rule=always)
        for rule in self.ask:
            if rule_matches(rule, facts):
                return Verdict(action="ask", reason=f"the rule `{rule}` asks", always_rule=always)
        for rule in (*self.allow, *self.session_rules):
            if rule_matches(rule, facts):
                return Verdict(action="allow", reason=f"allowed by `{rule}`")
        if facts.external:
            return Verdict(
                action="ask", reason=f"a call to {facts.external} asks first", always_rule=always
            )
        if facts.kind in ("read", "other"):
            return Verdict(action="allow", reason="reads never ask")
        if facts.kind == "edit" and self.mode == "edits":
            return Verdict(action="allow", reason="mode edits")
        if confined:
            return Verdict(action="allow", reason="mode edits: the command runs in the sandbox")
        what = "edits" if facts.kind == "edit" else "commands"
        return Verdict(
            action="ask", reason=f"mode {self.mode}: {what} ask first", always_rule=always
        )

    def _protected(self, facts: CallFacts) -> str:
        if facts.kind == "edit" and facts.path:
            path = facts.path.casefold()
            for folder in self.protected:
                if path == folder.casefold() or path.startswith(folder.casefold() + "/"):
                    return (
                        f"{facts.path} is in a skill folder ({folder}/): skills are "
                        "instructions the agent follows"
                    )
        if facts.kind == "command":
            command = facts.command.casefold()
            for folder in self.protected:
                if folder.casefold() in command:
                    return (
                        f"the command names a skill folder ({folder}/): skills are "
                        "instructions the agent follows"
                    )
        return ""

    @staticmethod
    def _sensitive(facts: CallFacts) -> str:
        if facts.kind == "read" and facts.path and is_credential_path(facts.path):
            return f"{facts.path} looks like a credentials file"
        if facts.kind == "read" and facts.glob and glob_names_credentials(facts.glob):
            return f"the glob `{facts.glob}` selects credentials files"
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
