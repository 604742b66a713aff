"""The context budget: how many prompt tokens a model call may use, and how many it would use.

Rules:
- Tokens are the provider's own count when it reports one, else an estimate of characters /
  3.5 (`providers.stream.estimate_tokens`, the one the providers use when a server reports no
  usage).
- The budget is `(window - min(max_output, window / 4)) * 0.85`: room is kept for the reply
  (but never more than a quarter of the window, so a large `max_output` cannot starve the
  prompt), and 15% more as a margin for the estimate's error and the provider's framing.
- `TokenMeter` counts the prompt the next call would send: the input tokens the provider
  reported for the last call, plus an estimate of the characters added since. When the history
  shrank since that report (compaction), the reported figure is scaled by how much of the
  reported prompt is left instead, since subtracting an estimate from a real count could go
  badly wrong after a large cut. Without a trustworthy report (none yet, or the provider only
  estimated), it is the estimate of the whole prompt: messages plus tool schemas.

Nothing here does I/O; a meter reads the list of messages it was given (a `History`'s, which
is changed in place) on every call.
"""

from collections.abc import Iterable, Sequence

from tether.daemon.context.images import image_tokens
from tether.daemon.providers.base import Message, ModelUsage, ToolSet
from tether.daemon.providers.stream import CHARS_PER_TOKEN, estimate_tokens

BUDGET_MARGIN = 0.85
"""Share of the window left for the prompt, after the reply's room, that the budget allows."""
MAX_OUTPUT_SHARE = 0.25
"""The reply's room is at most this share of the window."""


def message_chars(message: Message) -> int:
    """The characters of a message that the model reads: its content and its tool calls, and
    for each image the characters of its tokens (`images.image_tokens`). Counted once per
    message (the meter asks for the whole history before every call)."""
    if message.chars >= 0:
        return message.chars
    chars = len(message.content)
    for call in message.tool_calls:
        chars += len(call.name) + len(call.arguments)
    for image in message.images:
        chars += round(image_tokens(image.width, image.height) * CHARS_PER_TOKEN)
    message.chars = chars
    return chars


def messages_chars(messages: Iterable[Message]) -> int:
    return sum(message_chars(m) for m in messages)


def toolset_chars(tools: ToolSet | None) -> int:
    """Characters of the tool schemas offered to the model (names, descriptions, schemas)."""
    if tools is None:
        return 0
    return sum(
        len(spec.name) + len(spec.description) + len(spec.parameters) for spec in tools.specs
    )


def messages_tokens(messages: Iterable[Message]) -> int:
    """Estimated tokens of a list of messages (see `message_chars`)."""
    return estimate_tokens(messages_chars(messages))


def context_budget(window: int, max_output: int) -> int:
    """Prompt tokens a model call may use with a context window of `window` tokens and replies
    of up to `max_output` tokens: `(window - min(max_output, window / 4)) * 0.85`."""
    if window <= 0:
        raise ValueError(f"the context window must be positive, not {window}")
    reserved = min(max(max_output, 0), window * MAX_OUTPUT_SHARE)
    return int((window - reserved) * BUDGET_MARGIN)


class TokenMeter:
    """Tracks how much of the budget the conversation in `messages` uses.

    Call `record` after every model call with the usage it reported; `used()` is then that
    count plus an estimate of what the history gained since (see the module docstring).
    """

    def __init__(
        self, messages: Sequence[Message], *, budget: int, tools: ToolSet | None = None
    ) -> None:
        self.messages = messages
        """Read on every call, never copied: pass the list the conversation grows in."""
        self.budget = budget
        self.fixed_chars = toolset_chars(tools)
        """Characters sent with every call besides the messages (the tool schemas)."""
        self._reported: int | None = None
        self._chars_at_report = 0

    def record(self, usage: ModelUsage) -> None:
        """Note the usage of a model call that sent these messages, as soon as it returns (not
        of a summary request, whose prompt is another). Usage the provider only estimated is
        ignored: our own estimate is as good."""
        if usage.estimated or usage.input_tokens <= 0:
            self._reported = None
            return
        self._reported = usage.input_tokens
        self._chars_at_report = self.fixed_chars + messages_chars(self.messages)

    def used(self) -> int:
        """Prompt tokens the next model call would send."""
        now = self.fixed_chars + messages_chars(self.messages)
        if self._reported is None:
            return estimate_tokens(now)
        grown = now - self._chars_at_report
        if grown >= 0:
            return self._reported + estimate_tokens(grown)
        return round(self._reported * now / self._chars_at_report)
