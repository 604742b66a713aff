"""`tether sessions --search TEXT`: the workspace's prompts and answers that match, best
first."""

import argparse
import os
import re
import sys
import time

from tether.clients.cli.commands.output import age, print_json
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect
from tether.protocol.methods import SESSION_SEARCH, SearchHit, SessionSearchParams


def cmd_search(args: argparse.Namespace) -> int:
    """`tether sessions --search TEXT` (some text: `args.usage_error`)."""
    with connect(args) as client:
        result = client.call(
            SESSION_SEARCH,
            SessionSearchParams(query=args.search, limit=args.limit, syntax=args.syntax),
        )
    if args.json:
        print_json(result.hits)
        return EXIT_OK
    if not result.hits:
        print(f"nothing matches {args.search!r}")
        return EXIT_OK
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    now = time.time()
    for hit in result.hits:
        print(describe_hit(hit, now, bold=bold))
    return EXIT_OK


def describe_hit(hit: SearchHit, now: float, *, bold: bool = False) -> str:
    """Two lines: the session, its title and which message; then the snippet, the matched
    words in bold on a terminal and between « » elsewhere."""
    title = visible(" ".join(hit.title.split())) or "(untitled)"
    when = age(now - hit.updated_at)
    head = f"{hit.session_id}  {title}  ·  {hit.kind} in turn {hit.turn_id}, used {when}"
    marked: list[str] = []
    for part in hit.parts:
        text = visible(re.sub(r"\s+", " ", part.text))
        if part.match:
            text = f"\x1b[1m{text}\x1b[0m" if bold else f"«{text}»"
        marked.append(text)
    return f"{head}\n    {''.join(marked)}"
