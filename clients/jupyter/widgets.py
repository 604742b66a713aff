"""Approval buttons, when ipywidgets is installed (None otherwise).

A click is handled by the kernel once the cell that showed the approval has ended (it ended
because the turn waits: see `follow`). The click answers, disables the buttons and says the
answer, then follows the turn on in the same output the cell drew it in (its display id), as
`%tether approve` would in a new cell. What the click says, and its errors, go to an Output
widget under the buttons: a click has no cell of its own.
"""

import importlib.util
from collections.abc import Callable
from typing import Any

from tether.clients.core.text import visible
from tether.jupyter.actions import Notebook, Problem
from tether.jupyter.follow import Screen
from tether.jupyter.outputs import publish, publish_object
from tether.jupyter.render import Bundle
from tether.jupyter.view import TurnView
from tether.protocol.events import ApprovalRequest, Decision, DecisionScope
from tether.protocol.methods import PendingApproval


def available() -> bool:
    return importlib.util.find_spec("ipywidgets") is not None


def approval_buttons(notebook: Notebook, view: TurnView, screen: Screen) -> Any | None:
    """A box of buttons per pending approval of `view`, or None without ipywidgets."""
    if not available() or not view.pending:
        return None
    import ipywidgets

    rows = [
        _row(ipywidgets, notebook, view, approval, screen) for approval in view.pending.values()
    ]
    return ipywidgets.VBox(rows)


class _OutputCell:
    """A click's outputs: into the Output widget under its buttons."""

    def __init__(self, notebook: Notebook, output: Any) -> None:
        self.notebook = notebook
        self.output = output

    def screen(self) -> Screen:
        raise AssertionError("a click follows on the cell's own screen")

    def show(self, bundle: Bundle) -> None:
        with self.output:
            publish(bundle)

    def waiting(self, view: TurnView, screen: Screen) -> None:
        # Another approval of the same turn: its buttons go under this one's.
        box = approval_buttons(self.notebook, view, screen)
        if box is not None:
            with self.output:
                publish_object(box)


def _row(
    ipywidgets: Any, notebook: Notebook, view: TurnView, approval: ApprovalRequest, screen: Screen
) -> Any:
    output = ipywidgets.Output()
    cell = _OutputCell(notebook, output)
    choices: list[tuple[str, Decision, DecisionScope]] = [("Allow", "allow", "once")]
    if approval.always_rule:
        choices.append(("Always", "allow", "always"))
    choices.append(("Deny", "deny", "once"))
    buttons = [
        ipywidgets.Button(
            description=label,
            button_style="success" if decision == "allow" else "danger",
            tooltip=f"{label} {approval.tool} ({approval.id})",
        )
        for label, decision, _ in choices
    ]
    picked = PendingApproval(session_id=view.session_id, approval=approval)

    def clicked(decision: Decision, scope: DecisionScope) -> Callable[[Any], None]:
        def on_click(_button: Any) -> None:
            for button in buttons:
                button.disabled = True
            try:
                notebook.answer_on(cell, screen, picked, decision, scope)
            except Problem as exc:
                with output:
                    print(f"tether: {exc}")

        return on_click

    for button, (_, decision, scope) in zip(buttons, choices, strict=True):
        button.on_click(clicked(decision, scope))
    label = ipywidgets.Label(value=f"{visible(approval.tool)} [{approval.id}]")
    return ipywidgets.VBox([ipywidgets.HBox([label, *buttons]), output])
