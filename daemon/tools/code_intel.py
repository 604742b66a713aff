"""What the code-intelligence tools share (find_definition, find_references, symbols, hover):
their position params, the lease of a language server, the errors told plainly, and the
`path:line` lines with one line of source each.

A question no server can answer is a failed call that says why and what would answer it (a
server to install, a server still indexing), never an empty success. Lines of source are
shown for files inside the workspace only, read as read_file reads them (no symlink
followed), credential-like files left out as grep leaves them out; a location elsewhere (the
standard library's stubs, an installed package outside the workspace) is named, not read.
"""

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import msgspec
import trio

from tether.daemon.beneath import read_beneath
from tether.daemon.lsp.errors import RequestTimeout, ResponseError, ServerGone, Unavailable
from tether.daemon.lsp.navigation import Location, PositionError, lease_position
from tether.daemon.lsp.pool import Lease, LspPool
from tether.daemon.lsp.types import Position
from tether.daemon.tools.base import ToolContext, ToolFailure, ToolParams, resolve_in_workspace
from tether.daemon.tools.credentials import is_credential_path
from tether.daemon.workspace import display_path

LSP_SERVICE = "lsp"
MAX_LINE_CHARS = 200
MAX_READ_BYTES = 10 * 1024 * 1024
INDEXING = (
    "The {server} language server has just started and is still indexing the project; "
    "try again in a few seconds."
)

# LSP errors that mean "not now": ContentModified, ServerCancelled, ServerNotInitialized.
_RETRY_CODES = {-32801, -32802, -32002}


class SymbolAtParams(ToolParams, frozen=True, kw_only=True):
    path: Annotated[
        str, msgspec.Meta(description="File where the symbol appears, relative to the workspace.")
    ]
    line: Annotated[int, msgspec.Meta(ge=1, description="1-based line where the symbol appears.")]
    symbol: Annotated[
        str,
        msgspec.Meta(
            description="The symbol's name as written on that line (its first occurrence on "
            "the line is used; the column is found for you)."
        ),
    ] = ""
    column: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="1-based column of the symbol, only needed when its name appears more "
            "than once on the line (0, the default: found from `symbol`).",
        ),
    ] = 0

    def position_in(self, lease: Lease) -> Position:
        """Where the symbol is in the leased file, in its server's unit: at `column` when
        given, else where `symbol` first appears on the line (`PositionError` when the line or
        the name is not there, which `leased` tells plainly)."""
        return lease_position(lease, self.line, self.symbol, self.column or None)

    @property
    def shown_name(self) -> str:
        """The symbol as an answer names it: its name, else where it is."""
        return self.symbol or f"the symbol at {self.path}:{self.line}"


@asynccontextmanager
async def leased(ctx: ToolContext, path: str, capability: str) -> AsyncGenerator[Lease]:
    """A server for `path` that answers `capability`; the language-server errors raised by
    the body (and by the lease) become ToolFailures that say plainly what happened."""
    pool = ctx.services.get(LSP_SERVICE)
    if not isinstance(pool, LspPool):
        raise ToolFailure("Language servers are not available in this session; use grep.")
    target = resolve_in_workspace(ctx.workspace, path)
    name = "the"
    try:
        async with pool.lease(target, capability) as lease:
            name = lease.server
            yield lease
    except Unavailable as exc:
        raise ToolFailure(str(exc)) from None
    except PositionError as exc:
        raise ToolFailure(f"{path}: {exc}.") from None
    except RequestTimeout:
        raise ToolFailure(INDEXING.format(server=name)) from None
    except ResponseError as exc:
        if exc.code in _RETRY_CODES:
            raise ToolFailure(INDEXING.format(server=name)) from None
        raise ToolFailure(f"The {name} language server refused: {exc.message}") from None
    except ServerGone as exc:
        raise ToolFailure(
            f"The {name} language server stopped while answering ({exc}); try again."
        ) from None


def still_indexing(lease: Lease) -> ToolFailure:
    """The failure for an empty answer from a server started by this very call."""
    return ToolFailure(INDEXING.format(server=lease.server))


def where(ctx: ToolContext, location: Location) -> str:
    """`path:line`, the path relative to the workspace when inside it."""
    return f"{display_path(ctx.workspace, location.path)}:{location.line}"


async def source_lines(
    ctx: ToolContext, locations: Sequence[Location], lease: Lease
) -> dict[Path, list[str]]:
    """The lines of each file inside the workspace named in `locations` (the leased file as
    the server was sent it). Left out: files outside the workspace, credential-like ones (as
    grep leaves them out), files reached through a symlink, unreadable ones."""
    root = ctx.workspace.resolve()
    wanted = {
        loc.path
        for loc in locations
        if root in loc.path.parents and not is_credential_path(display_path(root, loc.path))
    }
    texts = {lease.path: lease.text.splitlines()} if lease.path in wanted else {}
    return texts | await trio.to_thread.run_sync(_read, root, wanted - texts.keys())


def _read(root: Path, paths: set[Path]) -> dict[Path, list[str]]:
    out: dict[Path, list[str]] = {}
    for path in paths:
        try:
            data, _ = read_beneath(root, path, limit=MAX_READ_BYTES)
        except OSError:
            continue
        out[path] = data.decode("utf-8", errors="replace").splitlines()
    return out


def line_of(lines: dict[Path, list[str]], location: Location) -> str:
    """The source line at `location`, stripped and cut ("" when not shown)."""
    content = lines.get(location.path)
    if content is None or not 1 <= location.line <= len(content):
        return ""
    text = content[location.line - 1].strip()
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + "…"


def located_line(ctx: ToolContext, lines: dict[Path, list[str]], location: Location) -> str:
    """`path:line: source` (or just `path:line` when the source is not shown)."""
    text = line_of(lines, location)
    return f"{where(ctx, location)}: {text}" if text else where(ctx, location)
