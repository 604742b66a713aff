"""Weighing a user's message before it is sent to the model.

A message (a prompt typed or piped in whole: `cat big.txt | tether run`) is estimated in tokens
(characters / 3.5) before the turn starts. One over `INPUT_SHARE` (half) of the prompt budget
(`budget.context_budget`) is refused with its size and what to do instead, unless the client
allows more (`turn/start`'s `maxInputTokens`, the CLI's `--max-input`); one over the whole
budget is refused whatever the client allows, since no compaction could make room for it.
Refused, nothing is sent and nothing is kept: a megabyte is never sent to be summarised away.
"""

from tether.daemon.context.budget import context_budget
from tether.daemon.providers.stream import estimate_tokens

INPUT_SHARE = 0.5
"""The share of the prompt budget a message may take unless the client allows more."""


def input_limit(window: int, max_output: int) -> int:
    """The tokens a message may take by default with this context window and reply room."""
    return int(context_budget(window, max_output) * INPUT_SHARE)


def input_refusal(text: str, *, window: int, max_output: int, allowed: int | None) -> str | None:
    """Why a message of `text` is not sent to a model with a context window of `window`
    tokens (`allowed`: the tokens the client allows it, None: `input_limit`); None when it
    fits."""
    tokens = estimate_tokens(len(text))
    budget = context_budget(window, max_output)
    limit = input_limit(window, max_output) if allowed is None else min(allowed, budget)
    if tokens <= limit:
        return None
    size = f"about {tokens:,} tokens ({len(text):,} characters)"
    if allowed is not None and allowed > budget:
        why = f"more than the {budget:,} tokens the model's context window ({window:,}) leaves"
    else:
        why = (
            f"over the limit of {limit:,} tokens for one message (the model's context window"
            f" is {window:,})"
        )
    advice = (
        "send less: pipe it through `head -c 50000`, or save it to a file and mention the file"
        " (`@path`, attached cut to fit)"
    )
    if limit < budget:
        advice += f", or allow more with `--max-input TOKENS` (at most {budget:,})"
    return f"the message is {size}, {why}; nothing was sent: {advice}"
