"""The approval question of the interactive mode, asked in the prompt's place."""

from collections.abc import Callable


class InlineQuestion:
    """The approval question, asked in the prompt's place: one key (y, a, n) answers it.
    Implements `approvals.AnswerPrompt`."""

    def __init__(self, changed: Callable[[], None], note: Callable[[str], None]) -> None:
        self._changed = changed
        self._note = note
        self.question: str | None = None
        self._answer: str | None = None

    def ask(self, prompt: str) -> None:
        self.question = prompt
        self._answer = None
        self._changed()

    def withdraw(self, note: str) -> None:
        self._note(note)
        self.question = None
        self._answer = None
        self._changed()

    def answer(self) -> str | None:
        answer, self._answer = self._answer, None
        return answer

    def give(self, line: str) -> None:
        self.question = None
        self._answer = line
        self._changed()
