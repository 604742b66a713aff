"""The IPython side: the `%tether` / `%%tether` magic and the cell outputs it draws.

In a kernel a followed turn is one output, created with `display(..., display_id=True)` and
redrawn in place with `update`; the outputs are plain MIME bundles (HTML and text), so a saved
notebook keeps the turn without any extension. A shell without a kernel (terminal IPython)
cannot redraw, so there the turn is printed once, when the cell stops following it.

Approvals: the view always names the magics that answer (`%tether approve ID`); with
ipywidgets installed, buttons are offered below it too (`widgets`).

A cell that stopped following because of an interrupt (or a lost connection) ends with an
error of one line, `Stopped`, and no traceback: like any interrupted cell it stops a "run
all" there, and the turn, which goes on in the daemon, is one `%tether attach` away.
"""

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import DisplayHandle

from tether.clients.core.rpc import CallError
from tether.clients.core.websocket import WebSocketError
from tether.jupyter.actions import Notebook, Problem
from tether.jupyter.commands import USAGE, parse_cell, parse_line
from tether.jupyter.follow import Outcome, Screen
from tether.jupyter.outputs import publish, publish_live, publish_object
from tether.jupyter.render import Bundle, turn_bundle
from tether.jupyter.view import TurnView


class KernelScreen:
    """A live output of the cell: drawn once, then redrawn in place."""

    def __init__(self) -> None:
        self._handle: DisplayHandle | None = None

    def show(self, view: TurnView) -> None:
        bundle = turn_bundle(view)
        if self._handle is None:
            self._handle = publish_live(bundle)
        else:
            self._handle.update(bundle, raw=True)


class PrintScreen:
    """A terminal's output: the turn printed once, when the cell stops following it."""

    def show(self, view: TurnView) -> None:
        if view.note or not view.running:
            print(turn_bundle(view)["text/plain"], end="")


class KernelCell:
    """The outputs of the cell a magic runs in."""

    def __init__(self, notebook: Notebook, *, live: bool) -> None:
        self.notebook = notebook
        self.live = live

    def screen(self) -> Screen:
        return KernelScreen() if self.live else PrintScreen()

    def show(self, bundle: Bundle) -> None:
        if self.live:
            publish(bundle)
        else:
            print(bundle["text/plain"])

    def waiting(self, view: TurnView, screen: Screen) -> None:
        if not self.live:
            return
        from tether.jupyter.widgets import approval_buttons

        buttons = approval_buttons(self.notebook, view, screen)
        if buttons is not None:
            publish_object(buttons)


class Stopped(Exception):
    """The cell stopped following a turn that goes on (an interrupt, a lost connection)."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback.
        return [f"tether: {self}"]


@magics_class
class TetherMagics(Magics):
    """`%tether COMMAND` and `%%tether` (see `commands.USAGE`)."""

    def __init__(self, shell: InteractiveShell, notebook: Notebook) -> None:
        super().__init__(shell)
        self.notebook = notebook

    @line_cell_magic
    def tether(self, line: str, cell: str | None = None) -> None:
        live = getattr(self.shell, "kernel", None) is not None
        out = KernelCell(self.notebook, live=live)
        try:
            if cell is None:
                outcome = self._line(out, line)
            else:
                args = parse_cell(line)
                nb = self.notebook
                outcome = nb.run(out, cell, new=args.new, session=args.session, mode=args.mode)
        except KeyboardInterrupt:
            raise Stopped("interrupted; %tether attach shows where the session is") from None
        except Problem as exc:
            raise UsageError(str(exc)) from None
        except CallError as exc:
            raise UsageError(f"the daemon refused: {exc.message}") from None
        except (OSError, WebSocketError) as exc:
            raise UsageError(f"lost the connection to the daemon: {exc}") from None
        if outcome == "detached":
            raise Stopped("detached; the turn goes on (%tether attach follows it again)")
        if outcome == "lost":
            raise Stopped("lost the connection to the daemon (%tether attach follows it again)")

    def _line(self, out: KernelCell, line: str) -> Outcome | None:
        args = parse_line(line)
        nb = self.notebook
        match args.command:
            case "attach":
                return nb.attach(out, args.target)
            case "sessions":
                nb.sessions(out)
            case "cancel":
                nb.cancel(out, args.target)
            case "approve":
                return nb.answer(out, args.target, "allow", always=args.always)
            case "deny":
                return nb.answer(out, args.target, "deny", message=args.message)
            case "help":
                print(USAGE)
        return None


def register(ipython: Any) -> TetherMagics:
    """Register the magics on `ipython`, with a fresh notebook state."""
    magics = TetherMagics(ipython, Notebook())
    ipython.register_magics(magics)
    return magics
