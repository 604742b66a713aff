"""The shapes of an error's `data`, for the codes that carry one (`ERROR_DATA`)."""

from typing import Literal

from tether.protocol.base import Wire
from tether.protocol.enums import ModelErrorCode
from tether.protocol.errors import ErrorCode


class ApprovalAnswered(Wire, frozen=True, kw_only=True):
    """The `data` of APPROVAL_RESOLVED: the answer that came first."""

    by: str
    """Who answered: a client's name, or `daemon` when the turn was cancelled."""
    decision: Literal["allow", "deny"]


class ModelUnavailable(Wire, frozen=True, kw_only=True):
    """The `data` of MODEL_UNAVAILABLE: why the model server could not be asked."""

    code: Literal[ModelErrorCode, "config_invalid"]
    """As `TurnError.code`: a model failure, or `config_invalid` (the user's settings cannot be
    read)."""


class MergeConflicted(Wire, frozen=True, kw_only=True):
    """The `data` of MERGE_CONFLICT: the files that conflict."""

    files: list[str]


ERROR_DATA: dict[ErrorCode, type[Wire]] = {
    ErrorCode.MERGE_CONFLICT: MergeConflicted,
    ErrorCode.APPROVAL_RESOLVED: ApprovalAnswered,
    ErrorCode.MODEL_UNAVAILABLE: ModelUnavailable,
}
"""The shape of `data` for the codes that carry it; the other codes carry none."""
