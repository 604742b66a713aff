"""What session search costs the store: the search trigger on every event written, indexing
an existing database at migration, a search, a fork and a delete.

The store alone (no daemon): a database of `--sessions` sessions of 10 turns each, every turn
a prompt, two tool calls with 4 KB of output each and an answer, as `item_completed` events
(what the store writes; deltas never reach it). Writes are timed as one batch on the
store's connection, with the search trigger and with it dropped, so the difference is what
indexing adds to writing an event: for a prompt or answer, parsing it and the FTS5 insert; for
anything else (tool output above all) only the byte search that lets it pass unparsed.

    python bench/session_search.py [--sessions 200]
"""

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from _harness import handle_sigterm, load_line, machine_line, median, ms, row
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.schema import SEARCH_BACKFILL, open_database
from tether.daemon.sessions.search import search
from tether.daemon.sessions.store import Store
from tether.protocol.events import AnyEvent, ItemCompleted, TurnCompleted, TurnStarted
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.protocol.methods import SessionSearchParams

TURNS = 10
WORDS = ["parser", "lexer", "token", "tabs", "widget", "render", "cache", "schema", "fork"]


def turn_events(session: int, turn: int) -> list[AnyEvent]:
    turn_id = f"t_{session}_{turn}"
    word = WORDS[(session + turn) % len(WORDS)]
    output = ("line of tool output " * 200)[:4096]
    calls = [
        ToolCall(id=f"c{i}", call_id=f"c{i}", tool="grep", arguments="{}", output=output)
        for i in range(2)
    ]
    return [
        TurnStarted(turn_id=turn_id, started_at=1.0),
        ItemCompleted(turn_id=turn_id, item=UserMessage(id="u", text=f"why does the {word} fail?")),
        *(ItemCompleted(turn_id=turn_id, item=c) for c in calls),
        ItemCompleted(turn_id=turn_id, item=AgentMessage(id="a", text=f"The {word} is fine now.")),
        TurnCompleted(turn_id=turn_id, status="completed", ended_at=2.0),
    ]


def bodies(sessions: int) -> list[tuple[str, int, bytes]]:
    encode = msgspec.json.Encoder().encode
    out: list[tuple[str, int, bytes]] = []
    for s in range(sessions):
        seq = 0
        for t in range(TURNS):
            for event in turn_events(s, t):
                seq += 1
                out.append((f"s_{s}", seq, encode(event)))
    return out


def write_all(path: Path, rows: list[tuple[str, int, bytes]], *, trigger: bool) -> float:
    conn = open_database(path)
    if not trigger:
        conn.execute("DROP TRIGGER events_searchable")
    conn.execute("BEGIN")
    for s in {r[0] for r in rows}:
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?, ?, 0, 0)", (s, s)
        )
    start = time.perf_counter()
    conn.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def migration(path: Path, rows: list[tuple[str, int, bytes]]) -> float:
    """Index the sessions of a version-2 database: the migration's backfill."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE events (session_id, seq, body, PRIMARY KEY (session_id, seq))")
    conn.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
    conn.execute(
        "CREATE VIRTUAL TABLE search USING fts5(text, session_id UNINDEXED, turn_id UNINDEXED,"
        " item_id UNINDEXED, kind UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')"
    )
    start = time.perf_counter()
    conn.execute(SEARCH_BACKFILL)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


async def store_figures(path: Path, runs: int = 20) -> dict[str, float]:
    store = Store(path)
    store.open()
    try:
        searches: list[float] = []
        for index in range(runs):
            start = time.perf_counter()
            await search(store, SessionSearchParams(query=WORDS[index % len(WORDS)], limit=20))
            searches.append(time.perf_counter() - start)
        start = time.perf_counter()
        row_ = SessionRow("s_fork", "", 0.0, 0.0, 0, None, forked_from="s_0", forked_turn="")
        await store.fork_session(row_, "s_0", None)
        fork = time.perf_counter() - start
        start = time.perf_counter()
        await store.delete_session("s_1")
        delete = time.perf_counter() - start
        return {"search": median(searches), "fork": fork, "delete": delete}
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    sessions: int = parser.parse_args().sessions
    handle_sigterm()
    print(f"session search: {sessions} sessions x {TURNS} turns; {machine_line()}")
    print(load_line())
    rows = bodies(sessions)
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        row("events written", f"{len(rows):,}")
        kinds = {
            "a prompt or answer (indexed)": [r for r in rows if b'_message"' in r[2]],
            "a tool call with 4 KB output (not indexed)": [r for r in rows if b'"c' in r[2]],
        }
        for number, (kind, chosen) in enumerate(kinds.items()):
            # The best of two runs each way: the figures are small and the machine is shared.
            plain = min(
                write_all(base / f"p{number}{i}.sqlite3", chosen, trigger=False) for i in (1, 2)
            )
            indexed = min(
                write_all(base / f"i{number}{i}.sqlite3", chosen, trigger=True) for i in (1, 2)
            )
            added = (indexed - plain) / len(chosen) * 1e6
            row(
                f"write of {kind}",
                f"+{added:.1f} us",
                note=f"({plain / len(chosen) * 1e6:.1f} us without)",
            )
        write_all(base / "indexed.sqlite3", rows, trigger=True)
        row("migration: indexing the existing events", ms(migration(base / "v2.sqlite3", rows)))
        figures = trio.run(store_figures, base / "indexed.sqlite3")
        row("search, 20 best hits (median)", ms(figures["search"]), "< 20 ms")
        row(f"fork of a {TURNS}-turn session", ms(figures["fork"]))
        row(f"delete of a {TURNS}-turn session", ms(figures["delete"]))


if __name__ == "__main__":
    main()
