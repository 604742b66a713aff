"""`tether export`: a session as a readable Markdown transcript, or its whole event log as
JSON lines (one `EventRecord`, `{"seq": …, "event": {…}}`, per line, as `session/events`
gives them), to stdout or a file."""

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec

from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.targets import configured_model, connect, resolve_session
from tether.clients.core.rpc import Client
from tether.protocol.methods import (
    SESSION_EVENTS,
    SESSION_READ,
    SessionEventsParams,
    SessionRef,
)


def cmd_export(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)
        if args.format == "md":
            from tether.clients.cli.transcript import transcript

            snapshot = client.call(SESSION_READ, SessionRef(session_id=session.id)).snapshot
            _write(args.output, iter([transcript(snapshot, configured_model(client))]))
        else:
            _write(args.output, event_lines(client, session.id))
    if args.output:
        print(f"exported {session.id} to {args.output}", file=sys.stderr)
    return EXIT_OK


def event_lines(client: Client, session_id: str, page: int = 1000) -> Iterator[str]:
    """The session's persisted events, one JSON line each, read a page at a time."""
    encoder = msgspec.json.Encoder()
    after = 0
    while True:
        result = client.call(
            SESSION_EVENTS, SessionEventsParams(session_id=session_id, after_seq=after, limit=page)
        )
        for record in result.events:
            yield encoder.encode(record).decode() + "\n"
        if not result.more or not result.events:
            return
        after = result.events[-1].seq


def _write(output: str | None, chunks: Iterator[str]) -> None:
    """`chunks` to stdout, or to the file `output`, which is replaced only once all of it is
    written (a failure leaves any file that was there as it was). The file is the owner's
    alone (0600), one that was there before included: a transcript holds code and command
    output."""
    if not output:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    target = Path(output)
    if target.is_dir():
        raise CliError(f"{target} is a directory; name a file", EXIT_USAGE)
    folder = target.resolve().parent
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.")  # 0600
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}", EXIT_USAGE) from exc
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            for chunk in chunks:
                file.write(chunk)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
