"""The permission gate: whether a tool call may run, must ask a person, or is refused.

Order of the rules, first match wins:

    1. a deny rule (user config, or the workspace's own config) naming
       the call, or any simple command a command line runs             -> deny
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
         a command line that is not plain (`tether.daemon.turn.command_line`:
         substitutions, redirections out of the workspace, `bash -c` of
         something not plain, …), or under `shell = "user"` anything but
         plain words, unless an allow or session rule names the whole line
         exactly (not when it runs in the sandbox in mode `edits`: see 9) -> ask
    7. an ask rule naming the call or any simple command it runs       -> ask
    8. allow rules, or session rules made by "always allow" answers: for a
       command line, one naming it exactly, or rules that together allow
       every simple command it runs                                    -> allow
    9. the mode: reads and bookkeeping never ask (a call to a program outside
       tether, an MCP server's tool, asks); `edits` lets edits run and
       asks for commands, except commands that run in the command sandbox
       (`sandboxed`, like Codex's workspace-write policy: what they can
       change is the workspace); `ask` asks for edits and commands      -> allow | ask

Searches (grep, glob) leave credential-like files out of what they read and list unless the
call names them (`names_credentials`, the same test the gate applies), so a search over the
whole workspace never reads a secret without a person being asked.

Rules are strings: `tool` (every call of that tool) or `tool(pattern)`. For edit tools the
pattern is matched against the workspace-relative path, `*` matching any run of characters.
For command tools it is read like a command, into words (quotes as the shell reads them), and
matched word by word against each simple command the line runs: a bare `*` word matches any
run of words (`run_command(npm run build *)` also allows `npm run build`), a `*` inside a word
matches within it, and a quoted `*` only itself. Deny and ask rules match a simple command as
it is written or normalised (assignments, wrappers like `command`/`env`/`timeout` and git's
global options folded away) and the whole line as text; allow rules only the words as run. A
rule whose pattern is the whole command line names it exactly. An MCP tool rule may name many
tools with `*` in the tool's name: `mcp__github__*` is every tool of the server `github`.

Rules narrow what the agent does; they are not a security boundary: a program a rule allows
can do anything it can do (a package script, a Makefile, a test), and a deny rule cannot see
what a variable or a script file will run. The sandbox is the boundary.

Which settings may come from where is the caller's business (see `tether.daemon.config.settings`):
the workspace's config can add deny and ask rules, never allow rules or the mode.
"""

import fnmatch
import posixpath
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
from tether.daemon.turn.command_line import Word, analyse, pattern_words, words_match
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
    cwd: str = ""
    """The workspace-relative folder a command runs in ("" or "." for the workspace's root)."""
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

# Control characters (escape sequences, carriage returns, …), bidi controls, zero-width and
# other format characters can hide or reorder what a terminal shows of a command.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
_SHOWN_CONTROLS = frozenset("\t\n")

EXACT_ONLY_PROGRAMS = (
    # interpreters and shells: any code at all
    "python*", "pypy*", "py", "node", "nodejs", "deno", "bun", "bunx", "ruby", "perl", "php",
    "lua*", "Rscript", "julia", "bash", "sh", "zsh", "fish", "dash", "ksh", "pwsh",
    "powershell", "osascript",
    # programs whose options or scripts run or change anything
    "sed", "gsed", "awk", "gawk", "mawk", "nawk", "find", "gfind", "xargs", "env", "eval",
    "exec", "sudo", "doas", "su", "nohup", "timeout", "nice", "setsid", "stdbuf", "uv", "uvx",
    "npx", "pipx",
    # downloaders
    "curl", "wget", "scp", "rsync", "ssh", "nc", "ncat",
    # destructive
    "rm", "rmdir", "dd", "mkfs*", "shred", "truncate", "chmod", "chown", "chgrp", "mv",
    "kill", "pkill", "killall", "reboot", "shutdown",
)  # fmt: skip
"""Programs (fnmatch patterns of base names) an "always" answer allows only exactly as run."""

SUBCOMMAND_WORD = re.compile(r"[a-z][a-z0-9_-]*\Z")
"""A first argument that names a subcommand (`status`, `run`): not an option, path or code."""

_ANY_SHELL_PLAIN = re.compile(r"[A-Za-z0-9_@%+,./:=\- \t]*\Z")
"""A command line no common shell reads as more than words (`shell = "user"`)."""


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


def command_risk(command: str, *, user_shell: bool = False) -> str:
    """Why a command must ask unless a rule names it exactly, or "" when it is plain (see
    `tether.daemon.turn.command_line`). `user_shell`: commands run in the user's own shell,
    whose syntax the gate does not know, so only a line of plain words in any shell passes."""
    if hidden := hidden_character_risk(command):
        return hidden
    if problem := analyse(command).problem:
        return problem
    if user_shell and not (
        _ANY_SHELL_PLAIN.match(command) and not any(w.startswith("=") for w in command.split())
    ):
        return (
            'commands run in your own shell (shell = "user"), which may read this line '
            "differently from bash"
        )
    return ""


def always_rule_for_command(tool: str, command: str) -> str:
    """The session rule an "always allow" answer adds, never broader than the command shown:
    for one simple command whose first argument is a subcommand word (`npm run build --prod`),
    the program and its subcommands followed by `*`; otherwise the command exactly (its
    words, quoted, or for a command line that is not one plain command, its text). "" when
    no rule could allow exactly what was shown."""
    line = analyse(command)
    text = f"{tool}({command.strip()})"
    judged = [c for c in line.commands if not c.wrapper]
    if line.problem or len(judged) != 1:
        return text
    words = judged[0].words
    program = words[0]
    literal = [w for w in words if w is not None]
    subcommands: list[str] = []
    if program is not None and not _matches_any(PurePosixPath(program).name, EXACT_ONLY_PROGRAMS):
        for word in words[1:3]:
            if word is None or not SUBCOMMAND_WORD.match(word):
                break
            subcommands.append(word)
    if subcommands and program is not None and len(words) > 1 + len(subcommands):
        return f"{tool}({shlex.join([program, *subcommands])} *)"
    if len(literal) == len(words):
        return f"{tool}({shlex.join(literal)})"
    # A glob or variable is only matched by a `*`: no exact rule can name it.
    return ""


def _split_rule(rule: str) -> tuple[str, str | None]:
    tool, paren, rest = rule.partition("(")
    if not paren:
        return tool.strip(), None
    return tool.strip(), rest.removesuffix(")").strip()


def _tool_matches(named: str, tool: str) -> bool:
    return named == tool or (named.startswith("mcp__") and fnmatch.fnmatchcase(tool, named))


def rule_matches(rule: str, facts: CallFacts) -> bool:
    """Whether `rule` names the call, as deny and ask rules (and hooks' `match`) read it: for
    a command, its pattern matches the words of any simple command the line runs (as run, or
    normalised: see `tether.daemon.turn.command_line`), or the whole line as text."""
    named, pattern = _split_rule(rule)
    if not _tool_matches(named, facts.tool):
        return False
    if pattern is None:
        return True
    if facts.kind != "command":
        return fnmatch.fnmatchcase(facts.path, pattern) or (
            pattern.endswith(" *") and facts.path == pattern[:-2]
        )
    if fnmatch.fnmatchcase(facts.command.strip(), pattern):
        return True
    words = pattern_words(pattern)
    if words is None:
        return False
    return any(
        words_match(words, command.words) or words_match(words, command.normal)
        for command in analyse(facts.command).commands
    )


def _allows_words(rule: str, tool: str, words: tuple[Word, ...]) -> bool:
    named, pattern = _split_rule(rule)
    if not _tool_matches(named, tool):
        return False
    if pattern is None:
        return True
    patterns = pattern_words(pattern)
    return patterns is not None and words_match(patterns, words)


def _names_exactly(rule: str, facts: CallFacts) -> bool:
    named, pattern = _split_rule(rule)
    return _tool_matches(named, facts.tool) and pattern == facts.command.strip()


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
        user_shell: bool = False,
    ) -> None:
        """`protected`: workspace-relative folders that edits (and commands naming them) may
        not change without asking, in any mode (the skill folders). `sandbox`: the command
        sandbox is on, so sandboxed commands run without asking in mode `edits`.
        `user_shell`: commands run in the user's own shell (`shell = "user"`), so every
        command that is more than plain words asks."""
        self.mode: PermissionMode = mode
        self.sandbox = sandbox
        self.user_shell = user_shell
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
        if facts.kind == "command" and (hidden := hidden_character_risk(facts.command)):
            return Verdict(action="ask", reason=hidden)  # no rule may allow it later
        always = self._always_rule(facts)
        allowed_by = self._allowed_by(facts)
        protected = self._protected(facts)
        if protected and not allowed_by:
            return Verdict(action="ask", reason=protected, always_rule=always)
        if self.mode == "auto":
            return Verdict(action="allow", reason="mode auto")
        confined = (
            self.sandbox and facts.kind == "command" and facts.sandboxed and self.mode == "edits"
        )
        sensitive = "" if confined else self._sensitive(facts)
        if sensitive and not self._named_exactly(facts):
            return Verdict(action="ask", reason=sensitive, always_rule=always)
        for rule in self.ask:
            if rule_matches(rule, facts):
                return Verdict(action="ask", reason=f"the rule `{rule}` asks", always_rule=always)
        if allowed_by:
            return Verdict(action="allow", reason=f"allowed by {allowed_by}")
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

    def _rules(self) -> tuple[str, ...]:
        return (*self.allow, *self.session_rules)

    def _named_exactly(self, facts: CallFacts) -> bool:
        return facts.kind == "command" and any(
            _names_exactly(rule, facts) for rule in self._rules()
        )

    def _allowed_by(self, facts: CallFacts) -> str:
        """The allow or session rules that let the call run (shown as `rule`, …), or "". A
        command line is allowed by a rule naming it exactly, or, when it is plain, by rules
        that together allow every simple command it runs."""
        rules = self._rules()
        if facts.kind != "command":
            return next((f"`{rule}`" for rule in rules if rule_matches(rule, facts)), "")
        for rule in rules:
            if _names_exactly(rule, facts):
                return f"`{rule}`"
        if command_risk(facts.command, user_shell=self.user_shell):
            return ""
        used: list[str] = []
        for command in analyse(facts.command).commands:
            if command.wrapper:
                continue
            rule = next((r for r in rules if _allows_words(r, facts.tool, command.words)), None)
            if rule is None:
                return ""
            if rule not in used:
                used.append(rule)
        return ", ".join(f"`{rule}`" for rule in used)

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

    def _sensitive(self, facts: CallFacts) -> str:
        if facts.kind == "read" and facts.path and is_credential_path(facts.path):
            return f"{facts.path} looks like a credentials file"
        if facts.kind == "read" and facts.glob and glob_names_credentials(facts.glob):
            return f"the glob `{facts.glob}` selects credentials files"
        if facts.kind == "edit" and facts.path and is_sensitive_edit(facts.path):
            return f"{facts.path} is a sensitive path (VCS, CI, agent or build configuration)"
        if facts.kind == "command":
            return command_risk(facts.command, user_shell=self.user_shell) or self._writes(facts)
        return ""

    def _writes(self, facts: CallFacts) -> str:
        """Why the files a command's redirections write must ask (as an edit of them would)."""
        folder = PurePosixPath(facts.cwd or ".")
        for target in analyse(facts.command).writes:
            path = posixpath.normpath(folder / target)
            if is_sensitive_edit(path) or is_credential_path(path):
                return f"the command writes to {path}, a sensitive path"
            for protected in self.protected:
                if path.casefold() == protected.casefold() or path.casefold().startswith(
                    protected.casefold() + "/"
                ):
                    return f"the command writes to {path}, in a skill folder ({protected}/)"
        return ""

    @staticmethod
    def _always_rule(facts: CallFacts) -> str:
        if facts.kind == "command":
            return always_rule_for_command(facts.tool, facts.command)
        if facts.path:
            return f"{facts.tool}({facts.path})"
        return facts.tool
