"""Publishing cell outputs through IPython's `display`, typed once here."""

from collections.abc import Callable
from typing import Any, cast

import IPython.display
from IPython.display import DisplayHandle

_display = cast(Callable[..., DisplayHandle | None], IPython.display.display)


def publish(bundle: dict[str, str]) -> None:
    """Add `bundle` (a MIME bundle) to the outputs of the cell that runs."""
    _display(bundle, raw=True)


def publish_live(bundle: dict[str, str]) -> DisplayHandle:
    """Add `bundle` as an output that `DisplayHandle.update` redraws in place."""
    handle = _display(bundle, raw=True, display_id=True)
    assert handle is not None
    return handle


def publish_object(value: Any) -> None:
    """Add `value` (a widget) to the outputs, as IPython represents it."""
    _display(value)
