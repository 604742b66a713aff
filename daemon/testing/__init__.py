"""A scripted fake model server speaking OpenAI chat completions and Anthropic Messages.

Each POST to ``/v1/chat/completions`` (OpenAI) or ``/v1/messages`` (Anthropic) consumes the
next step of one script, so a daemon pointed at this server behaves deterministically, whichever
dialect it speaks. It is used by tether's own tests and benchmarks and is meant for plugin
authors too, which is why it depends on the standard library only and imports nothing of
``tether.daemon`` (it speaks the wire formats itself).

Modules: `script` (the script format and its validation), `reply` (what a step's reply is made
of), `openai` and `anthropic` (the dialects), `checks` (what the APIs would refuse),
`state` (the step counter and recorded requests), `handler` (HTTP routing and streaming),
`server` (`ModelServer`), ``__main__`` (``python -m tether.testing --script FILE``).

>>> with ModelServer({"steps": [{"text": "hi"}]}) as server:
...     base_url = server.base_url  # "http://127.0.0.1:PORT/v1"
"""

from tether.testing.checks import anthropic_request_problem, openai_request_problem
from tether.testing.script import (
    ErrorSpec,
    PageSpec,
    Script,
    ScriptError,
    Step,
    ToolCallSpec,
    UsageSpec,
    load_script,
    parse_script,
)
from tether.testing.server import ModelServer

__all__ = [
    "ErrorSpec",
    "ModelServer",
    "PageSpec",
    "Script",
    "ScriptError",
    "Step",
    "ToolCallSpec",
    "UsageSpec",
    "anthropic_request_problem",
    "load_script",
    "openai_request_problem",
    "parse_script",
]
