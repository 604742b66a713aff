"""symbols: the workspace's symbols by name (`workspace/symbol`), or one file's outline
(`textDocument/documentSymbol`), from the language servers."""

from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.lsp.errors import LspError
from tether.daemon.lsp.navigation import Symbol, document_symbols, workspace_symbols
from tether.daemon.lsp.pool import LspPool
from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolParams
from tether.daemon.tools.code_intel import LSP_SERVICE, leased, still_indexing, where

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class SymbolsParams(ToolParams, frozen=True, kw_only=True):
    query: Annotated[
        str,
        msgspec.Meta(
            description="A name (or part of one) to search the workspace's symbols for. "
            "Leave empty, with `path`, to list that file's outline."
        ),
    ] = ""
    path: Annotated[
        str,
        msgspec.Meta(
            description="With no query: the file whose outline to list. With a query: a file "
            "of the language to search (needed only until that language's server runs)."
        ),
    ] = ""
    limit: Annotated[
        int,
        msgspec.Meta(ge=1, le=MAX_LIMIT, description=f"Symbols shown (default {DEFAULT_LIMIT})."),
    ] = DEFAULT_LIMIT


class Symbols:
    name: ClassVar[str] = "symbols"
    description: ClassVar[str] = (
        "Search the workspace's symbols (classes, functions, methods, variables…) by name "
        "with `query`, or list one file's outline with `path` alone, from the language "
        "servers. Each symbol comes as `kind name path:line` (an outline also gives the line "
        "range, nested symbols indented), at most `limit` "
        f"(default {DEFAULT_LIMIT}). Says so when no language server covers the files or the "
        "server is still indexing."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SymbolsParams

    async def run(self, params: SymbolsParams, ctx: ToolContext) -> str:
        if not params.query and not params.path:
            raise ToolFailure("Give a query to search the workspace, or a path for its outline.")
        if not params.query:
            return await self._outline(params, ctx)
        return await self._search(params, ctx)

    async def _outline(self, params: SymbolsParams, ctx: ToolContext) -> str:
        async with leased(ctx, params.path, "documentSymbolProvider") as lease:
            found = await document_symbols(lease)
            if not found and lease.just_started:
                raise still_indexing(lease)
        if not found:
            return f"{lease.server} found no symbols in {params.path}."
        out = [f"{params.path}: {len(found)} symbols"]
        for symbol in found[: params.limit]:
            location = symbol.location
            span = ""
            if location is not None:
                span = f" {location.line}" + (
                    f"-{location.end_line}" if location.end_line > location.line else ""
                )
            out.append(f"{'  ' * (symbol.depth + 1)}{symbol.kind} {symbol.name}{span}")
        return "\n".join(out + _more(len(found), params.limit))

    async def _search(self, params: SymbolsParams, ctx: ToolContext) -> str:
        found: list[Symbol] = []
        if params.path:
            async with leased(ctx, params.path, "workspaceSymbolProvider") as lease:
                found = await workspace_symbols(lease.client, params.query)
                if not found and lease.just_started:
                    raise still_indexing(lease)
        else:
            pool = ctx.services.get(LSP_SERVICE)
            servers = pool.running("workspaceSymbolProvider") if isinstance(pool, LspPool) else []
            if not servers:
                raise ToolFailure(
                    "No language server that searches symbols is running yet: give `path`, "
                    "any file of the language to search, to start one."
                )
            for _, client in servers:
                try:
                    with trio.move_on_after(client.request_timeout):
                        found += await workspace_symbols(client, params.query)
                except LspError:
                    continue
        found = _ranked(found, params.query)
        if not found:
            return f"No symbol matching {params.query!r} was found."
        out = [f"{len(found)} symbols matching {params.query!r}:"]
        for symbol in found[: params.limit]:
            container = f" (in {symbol.container})" if symbol.container else ""
            place = f" {where(ctx, symbol.location)}" if symbol.location is not None else ""
            out.append(f"  {symbol.kind} {symbol.name}{container}{place}")
        return "\n".join(out + _more(len(found), params.limit))


def _ranked(found: list[Symbol], query: str) -> list[Symbol]:
    """Exact names first, then names that start with the query, then the rest (the servers'
    fuzzy matches), each in the server's order; duplicates dropped."""
    unique = list(dict.fromkeys(found))
    folded = query.casefold()

    def rank(symbol: Symbol) -> int:
        name = symbol.name.casefold()
        return 0 if name == folded else 1 if name.startswith(folded) else 2

    return sorted(unique, key=rank)


def _more(total: int, limit: int) -> list[str]:
    return [f"… {total - limit} more not shown (raise limit)."] if total > limit else []
