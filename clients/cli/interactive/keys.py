"""What the keys do at the interactive prompt: Enter sends (or takes the completion shown),
Tab takes a completion (the only one offered at once, closing the menu),
Alt-Enter and Ctrl-J insert a newline, Esc closes the completions or cancels the running
turn, Ctrl-C clears the draft and twice in a row leaves, and while an approval is asked only
y, a, n and Enter (the default the question shows: no), and Ctrl-D, which leaves, do
anything."""

from collections.abc import Coroutine
from typing import Any, Protocol

from prompt_toolkit.application.current import get_app
from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from tether.clients.cli.interactive.leaving import SecondCtrlC
from tether.clients.cli.interactive.question import InlineQuestion
from tether.clients.cli.interactive.slash import BY_NAME
from tether.clients.cli.interactive.state import ChatState


class KeyHost(Protocol):
    """What the keys act on (the interactive session)."""

    question: InlineQuestion
    state: ChatState
    ctrl_c: SecondCtrlC

    def answer_question(self, line: str) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...

    async def cancel(self) -> None: ...

    def leave(self) -> None: ...


def key_bindings(chat: KeyHost) -> KeyBindings:
    kb = KeyBindings()
    asking = Condition(lambda: chat.question.question is not None)

    @kb.add("<any>", filter=asking)
    def _(event: KeyPressEvent) -> None:
        """While an approval is asked, other keys do nothing (the draft stays)."""

    for key in ("y", "a", "n", "Y", "A", "N"):

        @kb.add(key, filter=asking)
        def _(event: KeyPressEvent, key: str = key) -> None:
            chat.answer_question(key.lower())

    @kb.add("enter", filter=asking)
    def _(event: KeyPressEvent) -> None:
        chat.answer_question("")

    @kb.add("enter", filter=~asking)
    def _(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        state = buffer.complete_state
        if state is not None and state.current_completion is not None:
            buffer.apply_completion(state.current_completion)
            command = BY_NAME.get(buffer.text.strip())
            if not buffer.text.startswith("/") or (command and command.needs_argument):
                if command is not None:
                    buffer.insert_text(" ")
                return
        buffer.validate_and_handle()

    def unique() -> bool:
        state = get_app().current_buffer.complete_state
        return state is not None and len(state.completions) == 1

    @kb.add("tab", filter=~asking & Condition(unique))
    def _(event: KeyPressEvent) -> None:
        """The one completion offered is taken, and the menu closed: the next Enter sends. A
        file's path is followed by a space (nothing more to complete), a folder's is not."""
        buffer = event.current_buffer
        state = buffer.complete_state
        assert state is not None
        completion = state.completions[0]
        buffer.apply_completion(completion)
        if completion.text.startswith("@") and not completion.text.rstrip('"').endswith("/"):
            buffer.insert_text(" ")

    @kb.add("escape", "enter")
    @kb.add("c-j")
    def _(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("escape")
    def _(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.complete_state is not None:
            buffer.cancel_completion()
            return
        if chat.state.running_turn is not None:
            chat.spawn(chat.cancel())

    @kb.add("c-c")
    def _(event: KeyPressEvent) -> None:
        # "In a row": nothing typed since the last one (the prompt forgets it), and soon.
        if chat.ctrl_c.armed():
            chat.leave()
            return
        event.current_buffer.reset()
        chat.ctrl_c.press()

    @kb.add("c-d", filter=asking)
    def _(event: KeyPressEvent) -> None:
        chat.leave()

    return kb
