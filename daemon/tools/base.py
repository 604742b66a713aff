"""What every tool is, and what a running tool may touch.

A tool is a params Struct (its field docs become the schema the model sees), a description
stating its limits, a `kind` that the scheduler and the permission gate read, and an async
`run` returning the text for the model, or a `ToolOutput` when the call has more to tell the
people watching (a command's exit code, an edit's diff). A tool reports a problem the model
can act on by raising `ToolFailure`; the message goes back to the model as the call's result.
Any other exception is a bug, but it too becomes the call's failed result (the registry names
the exception), never a failed turn.

Kinds:
    read      looks, never changes anything (runs concurrently with neighbouring reads)
    edit      changes files; implements `target_path` and `preview` for the permission gate
    command   runs a program; implements `command_line` for the permission gate
    other     session bookkeeping (todo_write) and anything else; runs alone, never asks

A tool may bring its own JSON Schema instead of a params Struct (`SchemaTool`: an MCP server's
tool), and then checks a call's arguments itself; one that calls a program outside tether
(`ExternalTool`) asks first outside `auto`, unless a rule allows it.

A tool of any kind may also be `TrustGated` (skill): a call that uses what the user has not
trusted yet asks first, in every mode.
"""

import errno
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import (
    Any,
    ClassVar,
    Literal,
    Protocol,
    TypeAlias,
    TypeGuard,
    TypeVar,
    runtime_checkable,
)

import msgspec

from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.tools.images import ToolImage
from tether.daemon.workspace import display_path
from tether.protocol.events import ToolProgress
from tether.protocol.items import FileChange, Subagent

ToolKind = Literal["read", "edit", "command", "other"]
DEFAULT_RESULT_CAP = 20_000


class ToolFailure(Exception):
    """A failed call, explained for the model."""


class SymlinkLoop(ToolFailure):
    """A path whose symlinks lead back to themselves (or go on past the system's limit)."""


class ToolParams(msgspec.Struct, frozen=True, kw_only=True):
    pass


class ToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's result with what clients show beside it (see `ToolCall` in the protocol)."""

    text: str
    """What the model is told."""
    exit_code: int | None = None
    """A foreground command's exit status (negative: the signal that ended it)."""
    diff: str = ""
    """The unified diff an edit made ("" when it changed nothing)."""
    subagent: Subagent | None = None
    """The subagent a `task` call ran."""
    images: list[ToolImage] = []
    """Images for the model with the text (see `tether.daemon.tools.images`)."""
    edited: list[Path] = []
    """The files an edit changed besides its `target_path` (a rename's other files), so that
    they get diagnostics too."""


class FileVersion(msgspec.Struct, frozen=True, kw_only=True):
    """What the edit guard compares: a file as this agent last read or wrote it."""

    mtime_ns: int
    size: int
    digest: str

    @classmethod
    def of_status(cls, status: os.stat_result, content: bytes) -> "FileVersion":
        """The version of a file already open: its status and content as read."""
        return cls(
            mtime_ns=status.st_mtime_ns,
            size=status.st_size,
            digest=hashlib.sha256(content).hexdigest(),
        )


class ReadVersions:
    """The files a session's agent has read, with the version it saw (the edit guard)."""

    def __init__(self) -> None:
        self._versions: dict[Path, FileVersion] = {}

    def record(self, path: Path, version: FileVersion) -> None:
        self._versions[path] = version

    def get(self, path: Path) -> FileVersion | None:
        return self._versions.get(path)

    def forget(self, path: Path) -> None:
        self._versions.pop(path, None)

    def paths(self) -> list[Path]:
        """Every file read or written, resolved."""
        return list(self._versions)


class ChangeTracker(Protocol):
    """Where file changes are recorded: undo snapshots and the turn's files-changed summary."""

    async def before_write(self, path: Path) -> None:
        """Called before a tool writes or deletes `path`: save its current content (or its
        absence) once per turn, so that the turn can be undone."""
        ...

    def after_write(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        """Called after the write, with the content before and after (None: no file)."""
        ...

    def files_changed(self) -> list[FileChange]:
        """Each file the turn changed so far, for the turn's summary."""
        ...


class NoChanges:
    """A ChangeTracker that records nothing (tests of read-only tools)."""

    async def before_write(self, path: Path) -> None:
        return None

    def after_write(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        return None

    def files_changed(self) -> list[FileChange]:
        return []


class ToolContext:
    """What a running tool may touch. Tests build one over a temporary workspace."""

    def __init__(
        self,
        workspace: Path,
        *,
        session_id: str = "",
        turn_id: str = "",
        item_id: str = "",
        versions: ReadVersions | None = None,
        changes: ChangeTracker | None = None,
        output: Callable[[str], None] | None = None,
        progress: Callable[[ToolProgress], None] | None = None,
        services: "dict[str, object] | None" = None,
        result_cap: int = DEFAULT_RESULT_CAP,
        sandbox: Sandbox | None = None,
        shell: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.turn_id = turn_id
        self.item_id = item_id
        self.versions = versions if versions is not None else ReadVersions()
        self.changes: ChangeTracker = changes if changes is not None else NoChanges()
        self.output: Callable[[str], None] = output or (lambda _text: None)
        """Streams live output (command output) to every attached client."""
        self.progress: Callable[[ToolProgress], None] = progress or (lambda _report: None)
        """Tells every attached client how far the call has got (an MCP tool's progress)."""
        self.services: dict[str, object] = services if services is not None else {}
        """Daemon-owned services by name (the process table, the todo board, …)."""
        self.result_cap = result_cap
        self.sandbox = sandbox
        """Where commands run (None: unconfined), as the user's settings say this turn."""
        self.shell = shell
        """The shell commands run in (None: bash; see `tether.daemon.procs.shell`)."""
        self.env = env
        """The environment commands start from (None: the tool's own, by default the
        daemon's): the one the turn's client sent, secrets already removed."""


P_contra = TypeVar("P_contra", bound=ToolParams, contravariant=True)


class ToolOf(Protocol[P_contra]):
    """A tool whose calls carry its `params`, P_contra. The registry decodes a call's
    arguments with `params` (or the tool's own `decode`, a `SchemaTool`'s) and hands only that
    to `run` and to the methods of the protocols below, so a tool declares its methods with its
    own params type and never checks it again."""

    name: ClassVar[str]
    description: ClassVar[str]
    kind: ClassVar[ToolKind]
    params: ClassVar[type[ToolParams]]

    async def run(self, params: P_contra, ctx: ToolContext) -> "str | ToolOutput": ...


Tool: TypeAlias = ToolOf[Any]
"""Any tool, whatever its params: the registry holds them side by side."""


@runtime_checkable
class EditTool(Protocol):
    def target_path(self, params: ToolParams) -> str: ...

    async def preview(self, params: ToolParams, ctx: ToolContext) -> str:
        """A unified diff of what the call would change (raises ToolFailure if it cannot)."""
        ...


@runtime_checkable
class MultiFileEdit(Protocol):
    """An edit tool whose calls may change files besides their `target_path` (a rename
    across files): the permission gate judges every one of them as it judges the target."""

    async def edited_paths(self, params: ToolParams, ctx: ToolContext) -> list[str]:
        """The workspace-relative paths the call would change (raises ToolFailure if it
        cannot tell)."""
        ...


@runtime_checkable
class ConcurrentTool(Protocol):
    def concurrent(self, params: ToolParams) -> bool:
        """Whether this call, though the tool's kind is not `read`, may run beside the
        neighbouring read-only calls (it changes nothing itself)."""
        ...


@runtime_checkable
class CommandTool(Protocol):
    def command_line(self, params: ToolParams) -> str: ...


@runtime_checkable
class SandboxedTool(Protocol):
    """A command tool whose programs run in the command sandbox when the user turned it on
    (`ToolContext.sandbox`): the permission gate may then let its calls run without asking."""

    def runs_sandboxed(self, params: ToolParams) -> bool: ...


@runtime_checkable
class SchemaTool(Protocol):
    """A tool whose parameters are a JSON Schema it was given (an MCP server's), not a
    Struct: the registry offers that schema and lets the tool check a call's arguments."""

    def input_schema(self) -> dict[str, object]: ...

    def decode(self, arguments: str) -> "ToolParams | str":
        """The call's params, or what is wrong with its arguments, for the model."""
        ...


@runtime_checkable
class ExternalTool(Protocol):
    """A tool that hands the call to a program outside tether (an MCP server): whatever its
    kind, the permission gate asks about it outside `auto` unless a rule allows it."""

    def external_target(self) -> str:
        """What the call goes to, in words for the user ("MCP server github")."""
        ...


@runtime_checkable
class TrustGated(Protocol):
    """A tool some of whose calls use what the user has not trusted yet (a workspace's
    skills): the permission gate asks about such a call whatever the mode and rules say."""

    def trust_question(self, params: ToolParams) -> str:
        """What the user is asked to trust, in words for them ("" when nothing is untrusted)."""
        ...

    async def trust_granted(self, params: ToolParams, by: str) -> None:
        """Remember that `by` said yes, so that the question is not asked again."""
        ...


Shape = TypeVar("Shape")
_shapes: dict[tuple[type, type], bool] = {}


def implements(tool: object, protocol: type[Shape]) -> TypeGuard[Shape]:
    """`isinstance(tool, protocol)` for the runtime-checkable protocols above, remembered for
    the tool's class: a tool's methods are its class's, and such an isinstance looks up every
    member of the protocol each time (several per call, on every step of a turn)."""
    key = (type(tool), protocol)
    found = _shapes.get(key)
    if found is None:
        found = _shapes[key] = isinstance(tool, protocol)
    return found


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """Resolve `path` (relative to the workspace, or absolute) with symlinks followed; refuse
    (ToolFailure) anything that ends up outside the workspace, and (SymlinkLoop) a path whose
    links loop."""
    if "\x00" in path:
        raise ToolFailure("The path contains a NUL byte.")
    root = workspace.resolve()
    try:
        target = Path(os.path.realpath(root / path))
    except OSError as exc:  # a link on the path changed while it was being resolved
        raise ToolFailure(f"{path} changed while it was being resolved ({exc.strerror}).") from exc
    if target != root and root not in target.parents:
        raise ToolFailure(
            f"{path!r} is outside the workspace ({root}); only paths inside it can be used."
        )
    loop = loop_point(target)
    if loop is not None:
        raise SymlinkLoop(
            f"{path} cannot be used: symlink loop at {display_path(root, loop)} (links that "
            "lead back to each other never reach a file or folder)."
        )
    return target


def resolved_and_shown(workspace: Path, path: str) -> tuple[Path, str]:
    """`path` resolved (`resolve_in_workspace`, which refuses what it refuses) and its name as
    the model and clients see it (`display_path`)."""
    resolved = resolve_in_workspace(workspace, path)
    return resolved, display_path(workspace, resolved)


def loop_point(resolved: Path) -> Path | None:
    """The link where `resolved` (an `os.path.realpath` result) loops, or None if it does not.

    `os.path.realpath` leaves a looping link unresolved instead of raising, so the first
    symlink left in its result is the loop. (`Path.resolve` raises RuntimeError there on
    Python 3.11 and 3.12, which is why paths are resolved with realpath.)"""
    try:
        os.stat(resolved)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return None  # missing and the like: each tool says what that means for its call
        return next(
            (p for p in [*reversed(resolved.parents), resolved] if p.is_symlink()), resolved
        )
    return None
