"""Showing a session's events to a person: `Renderer` (see `renderer` for what goes where),
and the plain-text pieces the approval prompt and other commands use (`clients.core.text`)."""

from tether.clients.cli.render.renderer import Renderer, color_allowed
from tether.clients.core.text import (
    describe_approval,
    describe_call,
    describe_subject,
    describe_summary,
    visible,
)

__all__ = [
    "Renderer",
    "color_allowed",
    "describe_approval",
    "describe_call",
    "describe_subject",
    "describe_summary",
    "visible",
]
