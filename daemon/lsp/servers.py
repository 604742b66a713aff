"""The language servers tether knows, and the ones a user adds in config.

A spec says which files a server checks (by extension), how to start it (the first of its
commands whose program is found), and where the project a file belongs to starts: the nearest
folder, from the file's up to the workspace, holding one of the spec's root markers; the
workspace itself when none does. The pool runs one server per (spec, root).

Built in, used when installed:

    basedpyright   basedpyright-langserver --stdio, else pyright-langserver --stdio (types)
    ruff           ruff server (lint; one per workspace, it finds nested configs itself)
    typescript     TypeScript 7's own server: tsc --lsp --stdio (only a `tsc` of TypeScript 7
                   or later counts: an older one has no --lsp), else tsgo --lsp --stdio (the
                   preview's name), else typescript-language-server --stdio (it runs the
                   `tsserver.js` of TypeScript 5 or 6; when the TypeScript it would resolve
                   from its own install is a native one, that one's server runs instead)
    clangd         clangd
    gopls          gopls

Specs that share a `group` are alternatives: only the first one whose program is found runs.

Programs are looked up on PATH and then next to the daemon's own interpreter (the folder of
`sys.executable`: the venv's bin, where the dev dependencies `ruff` and
`basedpyright-langserver` live), never inside the workspace: a cloned repository must not be
able to choose what the daemon runs when a file is edited. A configured command may also be an
absolute path (`~` is expanded).

In a workspace the user trusts, the TypeScript server is the project's own TypeScript where it
has one (`trusted_command`): its TypeScript 7 server, or typescript-language-server for an
older TypeScript (which runs that one's `tsserver.js`).

Some servers go on to run programs of the workspace on their own: typescript-language-server
prefers the workspace's TypeScript (`node_modules/typescript/lib/tsserver.js`, a Yarn SDK's
`.yarn/sdks/typescript/lib`), pyright and basedpyright ask the workspace's `.venv/bin/python`
for its search paths. Until the user trusts the workspace (`tether.daemon.workspace_trust`)
such a server runs in its restricted form (`restricted_form`): typescript-language-server on
the user's own TypeScript (the one its install resolves, else the global one), with automatic
type acquisition off; TypeScript 7's server (always the user's: it is found outside the
workspace) with automatic type acquisition off; a Python type checker told to use the
daemon's interpreter. A server with no restricted form that is sure (typescript-language-
server with no TypeScript outside the workspace), or whose program itself lives in the
workspace, does not run until then.

Config (`LspServerConfig`, from the user's config only): a new name adds a server; a built-in's
name changes that server (fields left empty keep the built-in's values) or, with
`enabled = false`, turns it off.
"""

import os
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import cast

import msgspec

from tether.daemon.lsp.typescript import (
    LSP_ARGUMENTS,
    native_beside,
    native_package_command,
    project_typescript,
    serves_lsp,
)

LANGUAGE_IDS: Mapping[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "typescriptreact",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascriptreact",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".c++": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".rb": "ruby",
    ".lua": "lua",
    ".zig": "zig",
}
"""LSP language identifiers by file extension (a spec's `language_id` overrides them)."""


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    commands: tuple[tuple[str, ...], ...]
    """Candidates, in order of preference: program and arguments."""
    extensions: frozenset[str]
    """Lower-case, with the dot: `.py`."""
    root_markers: tuple[str, ...] = ()
    group: str = ""
    language_id: str = ""
    settings: Mapping[str, object] = {}
    """Answers to `workspace/configuration`, by section (dotted sections walk nested tables)."""
    initialization_options: object = None

    def handles(self, path: Path) -> bool:
        return path.suffix.lower() in self.extensions

    def language_for(self, path: Path) -> str:
        return self.language_id or LANGUAGE_IDS.get(path.suffix.lower(), "plaintext")

    def root_for(self, path: Path, workspace: Path) -> Path:
        """The nearest folder from `path`'s up to `workspace` with a root marker, else the
        workspace (`path` must be inside it)."""
        if self.root_markers:
            folder = path.parent
            while True:
                if any((folder / marker).exists() for marker in self.root_markers):
                    return folder
                if folder == workspace or workspace not in folder.parents:
                    break
                folder = folder.parent
        return workspace


class LspServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A language server from the user's config: a new one, or changes to a built-in."""

    name: str
    command: list[str] = []
    """Program and arguments, e.g. `["rust-analyzer"]`; the program is looked up on PATH and
    next to the daemon's interpreter unless it is a path."""
    extensions: list[str] = []
    """File extensions it checks: `.rs` (or `rs`)."""
    root_markers: list[str] = []
    """Files or folders that mark a project root: `Cargo.toml`."""
    language_id: str = ""
    """The LSP language id for its files, when the extension does not tell (`LANGUAGE_IDS`)."""
    settings: dict[str, object] = {}
    """Answers to the server's `workspace/configuration` requests, by section."""
    enabled: bool = True


def _normalise_extension(extension: str) -> str:
    extension = extension.strip().lower()
    return extension if extension.startswith(".") else "." + extension


_PYTHON_EXTENSIONS = frozenset({".py", ".pyi"})
_PYTHON_MARKERS = ("pyrightconfig.json", "pyproject.toml", "setup.py", "setup.cfg")


def _python_types(name: str, program: str) -> ServerSpec:
    """A Python type checker's server; they are alternatives (one group), first found runs."""
    return ServerSpec(
        name=name,
        commands=((program, "--stdio"),),
        extensions=_PYTHON_EXTENSIONS,
        root_markers=_PYTHON_MARKERS,
        group="python-types",
    )


TYPESCRIPT_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("tsc", *LSP_ARGUMENTS),
    ("tsgo", *LSP_ARGUMENTS),
    ("typescript-language-server", "--stdio"),
)

# TypeScript renames an imported name by aliasing the import (`import { a as b }`) unless told
# not to; rename_symbol is asked to rename the symbol itself, everywhere it is used.
_NO_RENAME_ALIASES = {"preferences": {"useAliasesForRenames": False}}
_TYPESCRIPT_SETTINGS = {"typescript": _NO_RENAME_ALIASES, "javascript": _NO_RENAME_ALIASES}

BUILTIN_SERVERS: tuple[ServerSpec, ...] = (
    _python_types("basedpyright", "basedpyright-langserver"),
    _python_types("pyright", "pyright-langserver"),
    ServerSpec(name="ruff", commands=(("ruff", "server"),), extensions=_PYTHON_EXTENSIONS),
    ServerSpec(
        name="typescript",
        commands=TYPESCRIPT_COMMANDS,
        extensions=frozenset({".ts", ".mts", ".cts", ".tsx", ".js", ".mjs", ".cjs", ".jsx"}),
        root_markers=("tsconfig.json", "jsconfig.json", "package.json"),
        settings=_TYPESCRIPT_SETTINGS,
    ),
    ServerSpec(
        name="clangd",
        commands=(("clangd",),),
        extensions=frozenset({".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx"}),
        root_markers=("compile_commands.json", "compile_flags.txt", ".clangd"),
    ),
    ServerSpec(
        name="gopls",
        commands=(("gopls",),),
        extensions=frozenset({".go"}),
        root_markers=("go.work", "go.mod"),
    ),
)


def merge_specs(
    configs: Sequence[LspServerConfig] = (),
    *,
    builtin: bool | Collection[str] = True,
) -> list[ServerSpec]:
    """The specs in force: the built-ins (all, none, or those named in `builtin`), changed,
    disabled or extended by `configs` in order."""
    if builtin is True:
        specs = list(BUILTIN_SERVERS)
    elif builtin is False:
        specs = []
    else:
        specs = [spec for spec in BUILTIN_SERVERS if spec.name in builtin]
    by_name = {spec.name: index for index, spec in enumerate(specs)}
    disabled: set[str] = set()
    for config in configs:
        if not config.enabled:
            disabled.add(config.name)
            continue
        disabled.discard(config.name)
        extensions = frozenset(_normalise_extension(e) for e in config.extensions)
        if config.name not in by_name:
            if not (config.command and config.extensions):
                raise ValueError(
                    f"language server {config.name!r}: a new server needs a command and extensions"
                )
            by_name[config.name] = len(specs)
            specs.append(
                ServerSpec(
                    name=config.name,
                    commands=(tuple(config.command),),
                    extensions=extensions,
                    root_markers=tuple(config.root_markers),
                    language_id=config.language_id,
                    settings=config.settings,
                )
            )
            continue
        index = by_name[config.name]
        base = specs[index]
        specs[index] = msgspec.structs.replace(
            base,
            commands=(tuple(config.command),) if config.command else base.commands,
            extensions=extensions or base.extensions,
            root_markers=tuple(config.root_markers) or base.root_markers,
            language_id=config.language_id or base.language_id,
            settings=config.settings or base.settings,
        )
    return [spec for spec in specs if spec.name not in disabled]


def find_program(program: str, *, path: str | None = None) -> str | None:
    """An executable for `program`: a path as given (`~` expanded), else a name found on
    PATH (`path`, default the environment's) or next to `sys.executable`."""
    if os.sep in program or program.startswith("~"):
        candidate = Path(program).expanduser()
        return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    found = shutil.which(program, path=path)
    if found:
        return found
    beside = Path(sys.executable).parent / program
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return None


def resolve_command(spec: ServerSpec, *, path: str | None = None) -> list[str] | None:
    """The first of the spec's commands whose program is installed and can serve LSP
    (`typescript.serves_lsp`), with the program's full path; None when none is. A
    typescript-language-server whose own TypeScript is a native one gives way to that
    TypeScript's server."""
    for command in spec.commands:
        if not command:
            continue
        program = find_program(command[0], path=path)
        if program is None or not serves_lsp(command, program):
            continue
        if Path(program).name == "typescript-language-server":
            native = native_beside(program)
            if native is not None:
                return native
        return [program, *command[1:]]
    return None


def _builtin_typescript(command: Sequence[str]) -> bool:
    return (Path(command[0]).name, *command[1:]) in TYPESCRIPT_COMMANDS


def trusted_command(
    command: list[str], root: Path, workspace: Path, *, path: str | None = None
) -> list[str]:
    """The command that runs a built-in TypeScript server `command` for the project at
    `root` of a trusted `workspace`: the project's own TypeScript 7 server; for an older
    TypeScript of the project, typescript-language-server when it is installed (it runs that
    TypeScript's `tsserver.js`); else `command`. Other commands are returned as they are
    (blocking: looks at the disk; `path`: PATH, default the environment's)."""
    if not _builtin_typescript(command):
        return command
    package = project_typescript(root, workspace)
    if package is None:
        return command
    native = native_package_command(package)
    if native is not None:
        return native
    if (package / "lib" / "tsserver.js").is_file():
        server = find_program("typescript-language-server", path=path)
        if server is not None:
            return [server, "--stdio"]
    return command


class AvailableServer(msgspec.Struct, frozen=True, kw_only=True):
    """A spec in force and the command that would run it (None: not installed)."""

    name: str
    extensions: list[str]
    command: list[str] | None


def available_servers(
    specs: Sequence[ServerSpec], *, path: str | None = None
) -> list[AvailableServer]:
    """Which of `specs` can run here: within a group, only the first installed one counts
    (the others are listed with no command)."""
    taken: set[str] = set()
    result: list[AvailableServer] = []
    for spec in specs:
        command = None if spec.group in taken else resolve_command(spec, path=path)
        if command is not None and spec.group:
            taken.add(spec.group)
        result.append(
            AvailableServer(name=spec.name, extensions=sorted(spec.extensions), command=command)
        )
    return result


RESTRICTED_NOTE = (
    "This workspace is not trusted yet, so its language servers run without its own "
    "TypeScript and Python environment: errors about unresolved third-party imports may be "
    "wrong until the user trusts the workspace (`tether trust`)."
)
"""Said with the diagnostics of servers that ran in their restricted form."""


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, with symlinks resolved, is `folder` or inside it."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return True  # cannot tell: treat it as the workspace's
    return real == folder or folder in real.parents


def user_tsserver(program: str, workspace: Path, *, path: str | None = None) -> str | None:
    """The `tsserver.js` of a TypeScript outside `workspace`: the one the typescript-language-
    server at `program` would resolve from its own install (its `node_modules`, then each
    folder above, which reaches a global install's), else the one whose `tsserver` is on PATH
    (`path`, default the environment's); None when there is neither."""
    candidates: list[Path] = []
    try:
        real = Path(program).resolve()
        candidates += [
            folder / "node_modules" / "typescript" / "lib" / "tsserver.js"
            for folder in real.parents
        ]
        on_path = shutil.which("tsserver", path=path)
        if on_path is not None:
            # npm links bin/tsserver to the package's bin folder, beside its lib.
            candidates.append(Path(on_path).resolve().parent.parent / "lib" / "tsserver.js")
    except (OSError, RuntimeError):
        return None
    for candidate in candidates:
        if candidate.is_file() and not inside(candidate, workspace):
            return str(candidate.resolve())
    return None


def _python_neutral(settings: Mapping[str, object]) -> dict[str, object]:
    """`settings` with the interpreter the checker asks for search paths set to the daemon's
    own (an absolute path, so no workspace `.venv` is looked for)."""
    python = settings.get("python")
    section = dict(cast("Mapping[str, object]", python)) if isinstance(python, Mapping) else {}
    section.update(pythonPath=sys.executable, defaultInterpreterPath=sys.executable)
    return {**settings, "python": section}


def restricted_form(
    spec: ServerSpec, command: list[str], workspace: Path, *, path: str | None = None
) -> ServerSpec | str:
    """How `spec`, run as `command`, runs in an untrusted `workspace` without running any of
    its programs: the spec itself when it runs none anyway, a changed one (see the module
    docstring), or why it cannot run so (blocking: looks at the disk; `path`: PATH for a
    global TypeScript, default the environment's)."""
    root = workspace.resolve()
    if inside(Path(command[0]), root):
        return f"{command[0]} lives in the workspace, which is not trusted (`tether trust`)"
    program = Path(command[0]).name
    if program in ("basedpyright-langserver", "pyright-langserver"):
        return msgspec.structs.replace(spec, settings=_python_neutral(spec.settings))
    options = spec.initialization_options
    base = dict(cast("Mapping[str, object]", options)) if isinstance(options, Mapping) else {}
    if program == "typescript-language-server":
        tsserver = user_tsserver(command[0], root, path=path)
        if tsserver is None:
            return (
                "the workspace is not trusted and no TypeScript of your own was found next to "
                "typescript-language-server or globally (install TypeScript 7, or `tether trust`)"
            )
        return msgspec.structs.replace(
            spec,
            initialization_options={
                **base,
                "tsserver": {"path": tsserver},
                "disableAutomaticTypingAcquisition": True,
            },
        )
    if program in ("tsc", "tsgo") and "--lsp" in command:
        # Type acquisition installs packages the workspace's package.json names.
        return msgspec.structs.replace(
            spec, initialization_options={**base, "disableAutomaticTypeAcquisition": True}
        )
    return spec


INSTALL_HINTS: Mapping[str, str] = {
    "basedpyright": "`uv tool install basedpyright` (or `pip install basedpyright`)",
    "pyright": "`npm install -g pyright`",
    "ruff": "`uv tool install ruff`",
    "typescript": "`npm install -g typescript-language-server typescript`",
    "clangd": "your system's clangd package (`apt install clangd`)",
    "gopls": "`go install golang.org/x/tools/gopls@latest`",
}
"""How to install each built-in server, for a user told that none covers a file."""

UNCONFIGURED_SERVERS: Mapping[str, tuple[str, str]] = {
    ".rs": ("rust-analyzer", "`rustup component add rust-analyzer`"),
    ".java": ("jdtls", "the Eclipse JDT language server (`jdtls`)"),
    ".rb": ("ruby-lsp", "`gem install ruby-lsp`"),
    ".lua": ("lua-language-server", "your system's lua-language-server package"),
    ".zig": ("zls", "your system's zls package"),
}
"""Servers tether does not build in, by extension: (program, how to install it). They run
once added to the config as an `[[lsp]]` table."""


def missing_server_note(path: Path, specs: Sequence[ServerSpec]) -> str:
    """Why no server covers `path`, and what would: a known server that is not installed
    (`specs`: those in force but not found), else one to add to the config."""
    for spec in specs:
        if spec.handles(path):
            hint = INSTALL_HINTS.get(spec.name, f"`{spec.commands[0][0]}`")
            return (
                f"No language server covers {path.suffix} files here: {spec.name} would, but "
                f"it is not installed (install {hint}; the daemon finds it on PATH)."
            )
    suffix = path.suffix.lower()
    known = UNCONFIGURED_SERVERS.get(suffix)
    if known is not None:
        program, hint = known
        return (
            f"No language server covers {suffix} files here: {program} would (install "
            f'{hint}, then add it to the config: [[lsp]] name = "{program}", command = '
            f'["{program}"], extensions = ["{suffix}"]).'
        )
    kind = f"{suffix} files" if suffix else "files without an extension"
    return (
        f"No language server covers {kind}. Add one to the config as an [[lsp]] table "
        "(name, command, extensions), or use grep."
    )
