"""Searching the workspace's sessions (`session/search`) in the store's FTS5 index of
prompts and answers (`schema.py` says what is indexed, and why tool output is not).

Rules:
- A person's text is taken literally: each whitespace-separated word becomes an FTS5 string
  (in double quotes, its own quotes doubled), and all of them must match. Words with no
  letter or digit are dropped (FTS5 would find nothing for them); if none is left the query
  is INVALID_PARAMS. No text can then be an FTS5 syntax error.
- With `syntax`, the text is FTS5's query language; what SQLite refuses is
  SEARCH_QUERY_INVALID with SQLite's words, never an internal error.
- Hits come best first (bm25), at most `SEARCH_MAX_HITS`; the snippet's matched words are
  marked in `parts`.
"""

import re

from tether.daemon.sessions.rows import MATCH_CLOSE, MATCH_OPEN, QueryRefused, SearchRow
from tether.daemon.sessions.store import Store
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import (
    SEARCH_MAX_HITS,
    SearchHit,
    SessionSearchParams,
    SessionSearchResult,
    SnippetPart,
)

_WORDY = re.compile(r"\w")


def literal_query(text: str) -> str:
    """`text` as an FTS5 query that matches its words literally ("" when it has none)."""
    words = [word for word in text.split() if _WORDY.search(word)]
    return " ".join('"' + word.replace('"', '""') + '"' for word in words)


async def search(store: Store, p: SessionSearchParams) -> SessionSearchResult:
    """Run `p` against the store's index (see the rules)."""
    match = p.query.strip() if p.syntax else literal_query(p.query)
    if not match:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            "invalid params for session/search: `query` has no word to search for",
        )
    limit = max(1, min(p.limit, SEARCH_MAX_HITS))
    try:
        found = await store.search(match, limit, p.session_id)
    except QueryRefused as exc:
        raise RpcError(
            ErrorCode.SEARCH_QUERY_INVALID, f"the search query {p.query!r} is not valid: {exc}"
        ) from exc
    return SessionSearchResult(hits=[_hit(row) for row in found], query=match)


def _hit(row: SearchRow) -> SearchHit:
    parts = snippet_parts(row.snippet)
    return SearchHit(
        session_id=row.session_id,
        title=row.title,
        turn_id=row.turn_id,
        item_id=row.item_id,
        kind="prompt" if row.kind == "prompt" else "answer",
        snippet="".join(part.text for part in parts),
        parts=parts,
        rank=row.rank,
        updated_at=row.updated_at,
    )


def snippet_parts(marked: str) -> list[SnippetPart]:
    """A snippet whose matches are between `MATCH_OPEN` and `MATCH_CLOSE`, in pieces."""
    parts: list[SnippetPart] = []
    for index, piece in enumerate(re.split(f"[{MATCH_OPEN}{MATCH_CLOSE}]", marked)):
        if piece:
            parts.append(SnippetPart(text=piece, match=index % 2 == 1))
    return parts
