"""grep: search file contents with a regex, through ripgrep or a pure-Python fallback.

The tool takes the params, resolves the path, decides which files a call may show, and picks
the engine; the engines and the one output format they share are in `daemon/tools/search/`.
Paths in the results are relative to the workspace and sorted; results are cut at
`head_limit` (files, or matching lines in content mode) with a note saying how many there were.

What is searched (both engines): the files under `path`, hidden ones included, skipping
dependency/cache/VCS folders, what `.gitignore`/`.ignore`/`.rgignore` files (and
`.git/info/exclude`) exclude — in a git repository or not — and binary files. A `glob` (as in
`rg --glob`) selects files by name and, as in ripgrep, wins over the ignore files for files it
names. Credential-like files (`is_credential_path`: `.env`, keys, `.ssh/`, …) are left out of the
results unless the call's path or glob names them (`names_credentials`; the permission gate
then asks). The fallback also skips files over 1 MB, refuses regexes with nested repetition, and
does not read ignore files above the workspace or the user's global gitignore.
"""

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.pathglob import GlobError
from tether.daemon.tools.base import (
    ToolContext,
    ToolFailure,
    ToolKind,
    ToolParams,
    resolved_and_shown,
)
from tether.daemon.tools.credentials import is_credential_path, names_credentials
from tether.daemon.tools.filetree import GitignorePattern, relative
from tether.daemon.tools.search.fallback import search_python
from tether.daemon.tools.search.formatting import MAX_LINE_CHARS, format_found
from tether.daemon.tools.search.found import Found
from tether.daemon.tools.search.query import MAX_HEAD_LIMIT, OutputMode
from tether.daemon.tools.search.ripgrep import find_rg, search_rg

DEFAULT_HEAD_LIMIT = 100
MAX_CONTEXT = 10
TIMEOUT_SECONDS = 30.0

AUTO = "auto"


class GrepParams(ToolParams, frozen=True, kw_only=True):
    pattern: Annotated[
        str, msgspec.Meta(description="Regular expression (ripgrep/Rust syntax), e.g. `def \\w+`.")
    ]
    path: Annotated[
        str,
        msgspec.Meta(
            description="File or folder to search, relative to the workspace. Default '.'."
        ),
    ] = "."
    glob: Annotated[
        str | None,
        msgspec.Meta(
            description="Only files matching this glob, e.g. `*.py`, `src/**/*.{ts,tsx}`."
        ),
    ] = None
    output_mode: Annotated[
        OutputMode,
        msgspec.Meta(
            description="files: paths of matching files (default); content: matching lines "
            "as path:line:text; count: matching lines per file."
        ),
    ] = "files"
    case_insensitive: Annotated[bool, msgspec.Meta(description="Ignore case. Default false.")] = (
        False
    )
    context: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=MAX_CONTEXT,
            description=f"Lines of context around each match (content mode), at most "
            f"{MAX_CONTEXT}. Default 0.",
        ),
    ] = 0
    head_limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=MAX_HEAD_LIMIT,
            description=f"Maximum results (files, or matching lines in content mode). Default "
            f"{DEFAULT_HEAD_LIMIT}, at most {MAX_HEAD_LIMIT}.",
        ),
    ] = DEFAULT_HEAD_LIMIT


class Grep:
    name: ClassVar[str] = "grep"
    description: ClassVar[str] = (
        "Search file contents with a regular expression (ripgrep syntax). output_mode: files "
        "(matching paths, default), content (path:line:text, with optional context lines, at "
        f"most {MAX_CONTEXT}) or count. Results are sorted by path, at most head_limit "
        f"(default {DEFAULT_HEAD_LIMIT}, max {MAX_HEAD_LIMIT}); lines are cut at "
        f"{MAX_LINE_CHARS} characters. Respects .gitignore; skips binary files and dependency "
        "folders (node_modules, .git, .venv, …); leaves out credential-like files (.env, keys, "
        ".ssh/…) unless path or glob names them, which asks the user first; stops after 30 s. "
        "Without ripgrep a slower "
        "search is used that skips files over 1 MB and refuses nested repetition like `(a+)+`."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = GrepParams

    def __init__(self, rg_path: str | None = AUTO, *, timeout: float = TIMEOUT_SECONDS) -> None:
        """`rg_path`: the ripgrep executable; `AUTO` finds it (`find_rg`); None: always use
        the Python fallback."""
        self.rg_path = find_rg() if rg_path == AUTO else rg_path
        self.timeout = timeout

    def file_glob(self, params: GrepParams) -> str:
        return params.glob or ""

    async def run(self, params: GrepParams, ctx: ToolContext) -> str:
        if not params.pattern:
            raise ToolFailure("The pattern is empty.")
        root = ctx.workspace.resolve()
        start, shown = resolved_and_shown(ctx.workspace, params.path)
        if not start.exists():
            raise ToolFailure(f"{params.path} does not exist.")
        target = relative(root, start)
        named = names_credentials(target, params.glob or "")
        hidden = None if named else is_credential_path
        if self.rg_path is not None:
            found = await search_rg(
                self.rg_path, root, target or None, params, self.timeout, hidden
            )
        else:
            found = await self._fallback(root, start, params, hidden)
        return format_found(found, params.context, params.pattern, shown)

    async def _fallback(
        self, root: Path, start: Path, params: GrepParams, hidden: Callable[[str], bool] | None
    ) -> Found:
        if params.glob:
            try:
                GitignorePattern(params.glob)
            except GlobError as exc:
                raise ToolFailure(f"{exc}. Use a simpler glob.") from None
        stop = threading.Event()
        try:
            return await trio.to_thread.run_sync(
                search_python,
                root,
                start,
                params,
                self.timeout,
                stop,
                hidden,
                abandon_on_cancel=True,
            )
        finally:
            stop.set()
