"""The assistant's replies as they stream, on `out`: styled Markdown printed block by block
with the open block in the live region, plain text line by line or whole, and a superseded
reply taken back where it can be (see `renderer` for the rules)."""

from typing import TYPE_CHECKING

from tether.clients.cli.render.blocks import open_block_start
from tether.clients.cli.render.screen import Screen
from tether.clients.cli.render.under_way import UnderWay
from tether.clients.core.text import visible
from tether.protocol.items import AgentMessage

if TYPE_CHECKING:
    from tether.clients.cli.render.styled import Painter

SUPERSEDED_LINE = "(the reply above broke off; the retried reply replaces it)"


class Reply:
    """An agent message being streamed."""

    def __init__(self, item_id: str, text: str = "") -> None:
        self.id = item_id
        self.text = text
        self.done = 0
        """Styled: where the block still open starts (everything before it is printed)."""
        self.open_rows = 0
        """Styled: rows of the open block printed already (it outgrew the live region)."""
        self.rows = 0
        """Styled: rows printed for this message, for erasing it."""
        self.rendered: tuple[tuple[int, int, int], list[str]] | None = None
        """Styled: the open block's rows, and the (length, done, columns) they are for."""


class Replies:
    """The replies being streamed, by item id, and how they reach `out`."""

    def __init__(self, screen: Screen, under: UnderWay) -> None:
        self._screen = screen
        self._under = under
        self.streaming: dict[str, Reply] = {}

    def start(self, item_id: str) -> None:
        screen = self._screen
        self.streaming[item_id] = Reply(item_id)
        if screen.live:
            screen.newline()
            screen.erasable = item_id

    def delta(self, item_id: str, delta: str, now: float) -> bool:
        """Add `delta` to the reply `item_id`; False when no reply of that id streams."""
        screen = self._screen
        message = self.streaming.get(item_id)
        if message is None:
            return False
        message.text += delta
        if screen.styled_out:
            self._advance(message, now)
        elif screen.live and not screen.region:
            self._plain_lines(message)
        elif screen.live:
            screen.out.write(visible(delta, multiline=True))
            screen.mid_line = not delta.endswith("\n")
        return True

    def resume(self, item: AgentMessage, now: float) -> None:
        """A reply still streaming when the snapshot was taken: later deltas continue it."""
        screen = self._screen
        message = self.streaming[item.id] = Reply(item.id, item.text)
        if screen.styled_out:
            screen.erasable = item.id
            self._advance(message, now)
        elif screen.live and not screen.region:
            self._plain_lines(message)
        elif screen.live:
            screen.newline()
            screen.out.write(visible(item.text, multiline=True))
            screen.mid_line = bool(item.text) and not item.text.endswith("\n")
            screen.erasable = item.id

    def completed(self, item: AgentMessage) -> None:
        screen = self._screen
        message = self.streaming.pop(item.id, None)
        if screen.styled_out:
            self._styled_completed(item, message)
            return
        shown = screen.live and message is not None
        if item.superseded:
            written = screen.region or (message is not None and message.done > 0)
            if shown and written:  # plain text cannot be taken back
                screen.newline()
                screen.say(SUPERSEDED_LINE)
            return
        if not shown:
            screen.newline()
            screen.out.write(visible(item.text, multiline=True))
            screen.mid_line = not item.text.endswith("\n")
        elif not screen.region:
            assert message is not None
            message.text = item.text
            self._plain_lines(message, final=True)
        screen.erasable = None
        screen.newline()

    def finish(self) -> None:
        """The turn ended: print what is left of the replies it ended without."""
        screen = self._screen
        for message in list(self.streaming.values()):
            if screen.styled_out:
                self._print_rows(message, len(message.text))
            elif screen.live and not screen.region:
                self._plain_lines(message, final=True)
            elif not screen.live and message.text:
                screen.newline()
                screen.out.write(visible(message.text, multiline=True))
                screen.mid_line = not message.text.endswith("\n")
        self.streaming.clear()

    def region_rows(self, painter: "Painter", columns: int) -> list[str]:
        """The rows of the open blocks not printed yet, for the live region."""
        rows: list[str] = []
        if self._screen.styled_out:
            for message in self.streaming.values():
                rows += self._block_rows(message, painter, columns)[message.open_rows :]
        return rows

    def _styled_completed(self, item: AgentMessage, message: Reply | None) -> None:
        if message is None:
            message = Reply(item.id)
            self._screen.erasable = item.id
        if item.superseded:
            if message.rows and not self._erase_rows(message):
                self._screen.say(SUPERSEDED_LINE)
            return
        message.text = item.text
        self._print_rows(message, len(item.text))
        self._screen.erasable = None

    def _advance(self, message: Reply, now: float) -> None:
        """Print what of a styled message later text can no longer change: its finished
        blocks, and the top of an open block that outgrew the live region (a long code
        block scrolls, as it would on a terminal)."""
        screen = self._screen
        cut = open_block_start(message.text, message.done)
        if cut > message.done:
            self._print_rows(message, cut)
        if not screen.region:
            return  # the open block is printed when it closes
        assert screen.painter is not None
        columns, rows = screen.size()
        status = self._under.status_lines(screen.painter, columns, now) if screen.styled_err else []
        room = max(3, rows - 2 - len(status))
        pending = self._block_rows(message, screen.painter, columns)[message.open_rows :]
        if len(pending) > room:
            self._print(message, pending[: len(pending) - room])
            message.open_rows += len(pending) - room

    def _print_rows(self, message: Reply, upto: int) -> None:
        """Print a styled message's text up to `upto` (the end of a block) for good."""
        assert self._screen.painter is not None
        columns, _ = self._screen.size()
        text = message.text
        message.text = text[:upto]
        rows = self._block_rows(message, self._screen.painter, columns)[message.open_rows :]
        message.text = text
        self._print(message, rows)
        message.done, message.open_rows, message.rendered = upto, 0, None

    def _print(self, message: Reply, rows: list[str]) -> None:
        screen = self._screen
        erasable = screen.erasable == message.id or message.rows == 0
        screen.emit(screen.out, rows)
        message.rows += len(rows)
        if erasable:
            screen.erasable = message.id

    def _plain_lines(self, message: Reply, *, final: bool = False) -> None:
        """Without a region, plain: write a streamed message's complete lines not written
        yet (`final`: all the rest, ended with a newline); `done` counts what was written."""
        end = len(message.text) if final else message.text.rfind("\n") + 1
        if end <= message.done:
            return
        text = message.text[message.done : end]
        self._screen.out.write(
            visible(text, multiline=True) + ("" if text.endswith("\n") else "\n")
        )
        message.done = end

    def _erase_rows(self, message: Reply) -> bool:
        """Take a styled message's printed rows off the screen; False when they cannot all be
        reached (something was printed after them, or they scrolled away)."""
        screen = self._screen
        _, lines = screen.size()
        if not screen.region:
            return False  # nothing printed is taken back
        if screen.erasable != message.id or message.rows + len(screen.drawn) > lines - 1:
            return False
        screen.clear_region()
        screen.out.write(f"\r\x1b[{message.rows}A\x1b[J")
        screen.erasable = None
        return True

    def _block_rows(self, message: Reply, painter: "Painter", columns: int) -> list[str]:
        """The rows of a styled message's open block (all of them, those printed already
        included), with the blank line that separates it from the block before."""
        key = (len(message.text), message.done, columns)
        if message.rendered is None or message.rendered[0] != key:
            text = visible(message.text[message.done :], multiline=True)
            rows = painter.markdown(text, columns)
            if rows and message.rows and message.done:
                rows.insert(0, "")
            message.rendered = (key, rows)
        return message.rendered[1]
