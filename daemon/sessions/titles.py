"""A session's title: the automatic one (the first line of its first message) and one a
client gives it (`session/rename`).

Rules:
- A title is one line: runs of whitespace (newlines included) become one space and the ends
  are trimmed; other control characters and more than `TITLE_MAX_CHARS` characters are
  refused (INVALID_PARAMS), so nothing the user typed is silently cut.
- An empty title means the automatic one: the first line of the session's first message (80
  characters), or none before its first turn, when the first turn then gives it one.
- A rename that changes nothing emits nothing; one that does emits `session_renamed` with
  who renamed it, which every attached client receives and the store keeps.
"""

import unicodedata

from tether.daemon.sessions.session import Session
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.events import SessionRenamed
from tether.protocol.items import UserMessage
from tether.protocol.methods import TITLE_MAX_CHARS

AUTOMATIC_TITLE_CHARS = 80


def automatic_title(text: str) -> str:
    """The title a session gets from its first message: its first non-blank line, cut."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:AUTOMATIC_TITLE_CHARS]


def clean_title(text: str) -> str:
    """`text` as a title (see the rules); INVALID_PARAMS when it cannot be one."""
    title = " ".join(text.split())
    if len(title) > TITLE_MAX_CHARS:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"a title is at most {TITLE_MAX_CHARS} characters; this one has {len(title)}",
        )
    if any(unicodedata.category(char) == "Cc" for char in title):
        raise RpcError(ErrorCode.INVALID_PARAMS, "a title cannot hold control characters")
    return title


def first_message_title(session: Session) -> str:
    """The automatic title of `session` as it is now ("" before its first message)."""
    for item in session.items():
        if isinstance(item, UserMessage) and not item.parent_item_id:
            return automatic_title(item.text)
    return ""


def rename(session: Session, title: str, *, by: str) -> None:
    """Give `session` the title `title` (empty: the automatic one); INVALID_PARAMS when
    `title` cannot be one, and then nothing changes."""
    chosen = clean_title(title) or first_message_title(session)
    if chosen != session.title:
        session.emit(SessionRenamed(title=chosen, by=by))
