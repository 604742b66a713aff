"""How long a second Ctrl-C after a detach still cancels (`tether attach`)."""

import pytest

from tether.clients.cli.follow import DETACH_WINDOW_S, detach_window


def test_the_window_is_the_default_unless_the_environment_names_seconds() -> None:
    assert detach_window({}) == DETACH_WINDOW_S
    assert detach_window({"TETHER_DETACH_WINDOW": "0.1"}) == 0.1
    assert detach_window({"TETHER_DETACH_WINDOW": "0"}) == 0


@pytest.mark.parametrize("value", ["", "soon", "-1", "nan", "inf", "61"])
def test_a_value_that_is_not_a_sane_number_of_seconds_keeps_the_default(value: str) -> None:
    assert detach_window({"TETHER_DETACH_WINDOW": value}) == DETACH_WINDOW_S
