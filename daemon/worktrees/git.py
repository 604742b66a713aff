"""Running git in a workspace's repository without letting the repository run code.

A repository's own config (`.git/config`, its worktree config and whatever they include) is
the workspace's to write, so it is treated like the rest of the workspace: untrusted. Every
git tether runs:

- turns off what runs programs on any command: hooks (`core.hooksPath=/dev/null`), the file
  system monitor (`core.fsmonitor=false`), the ssh command, pagers, editors, credential and
  password prompts, commit signing, external diff programs;
- reads neither the system config nor any `GIT_*` variable of the daemon's environment (one
  could point git at another repository or config);
- is refused outright when the repository's own config names a program git would run for a
  file (`filter.*.clean/smudge/process`, `diff.*.textconv/command`, `merge.*.driver`, …):
  no `-c` can switch those off by name, since the repository chooses the names. The user's
  global config is the user's own and is read as usual (Git LFS installs its filter there).

Errors:

    GitError            git could not do it; the message is git's own, trimmed
    └── UnsafeRepository the repository's config names programs git would run
"""

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

SAFE_OPTIONS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.sshCommand=false",
    "-c",
    "core.pager=cat",
    "-c",
    "core.editor=false",
    "-c",
    "sequence.editor=false",
    "-c",
    "core.askPass=",
    "-c",
    "credential.helper=",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "diff.external=",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "protocol.allow=never",
    "--no-pager",
)
"""Options every git command starts with (command-line config wins over every file)."""

_PROGRAM_KEYS = re.compile(
    r"^(filter\..+\.(clean|smudge|process)"
    r"|diff\..+\.(textconv|command)"
    r"|merge\..+\.driver"
    r"|core\.(worktree|gitproxy|alternaterefscommand)"
    r"|gpg\..*program"
    r"|gpg\.ssh\.defaultkeycommand"
    r"|uploadpack\.packobjectshook"
    r"|submodule\..+\.update)$"
)
"""Repository config keys that make git run a program, or look at another folder, that the
options above cannot switch off by name."""


class GitError(Exception):
    """Git could not do what was asked; the message says what and git's words."""


class UnsafeRepository(GitError):
    """The repository's own config names programs git would run."""


@dataclass(frozen=True, slots=True)
class GitResult:
    returncode: int
    stdout: str
    stderr: str


def git_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment without `GIT_*` variables, with prompts, pagers and the
    system config off, and git's messages in English (they are parsed)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.pop("SSH_ASKPASS", None)
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        PAGER="cat",
        GIT_EDITOR="false",
        GIT_ASKPASS="",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


def run_git(
    folder: Path,
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> GitResult:
    """Run `git ARGS` in `folder` with `SAFE_OPTIONS` (blocking: call it from a worker
    thread). `check`: a non-zero exit raises `GitError`; `env`: added to the environment."""
    try:
        done = subprocess.run(
            ["git", *SAFE_OPTIONS, *args],
            cwd=folder,
            env=git_environment(env),
            input=input_text if input_text is not None else "",
            capture_output=True,
            text=True,
            errors="surrogateescape",
            check=False,
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed (it is needed for worktree sessions)") from exc
    result = GitResult(done.returncode, done.stdout, done.stderr)
    if check and done.returncode != 0:
        words = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise GitError(f"git {args[0]} failed: {' '.join(words[-3:]) or f'exit {done.returncode}'}")
    return result


def program_settings(folder: Path) -> list[str]:
    """The keys of the repository's own config (local and worktree scopes, includes
    followed) that would make git run a program it names."""
    listed = run_git(folder, "config", "--list", "--includes", "--show-scope", "-z").stdout
    found: list[str] = []
    fields = listed.split("\0")
    # With -z each entry is its scope, then its key and value on one field.
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        key = entry.split("\n", 1)[0].lower()
        if scope in ("local", "worktree") and _PROGRAM_KEYS.match(key):
            found.append(key)
    return found


def check_safe(folder: Path) -> None:
    """Raise `UnsafeRepository` when the repository's config names programs to run."""
    found = program_settings(folder)
    if found:
        raise UnsafeRepository(
            "the repository's own config names programs git would run ("
            + ", ".join(sorted(set(found)))
            + "); tether runs no git in it. Remove those settings from .git/config to use "
            "worktree sessions"
        )
