"""The scripted fake model server (see `tether.testing.server`)."""

from tether.testing.server import (
    ErrorSpec,
    ModelServer,
    PageSpec,
    Script,
    ScriptError,
    Step,
    ToolCallSpec,
    UsageSpec,
    anthropic_request_problem,
    load_script,
    parse_script,
)

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
    "parse_script",
]
