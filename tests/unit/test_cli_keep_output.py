"""While a turn is followed on a terminal, Ctrl-C throws away none of tether's output: the
terminal's NOFLSH is set for the while and only that flag is put back after."""

import io
import os
import termios
from collections.abc import Iterator

import pytest

from tether.clients.cli.keep_output import output_kept_on_interrupt

_LFLAG = 3


@pytest.fixture
def terminal() -> Iterator[io.TextIOWrapper]:
    """The slave end of a new pty, as a text stream (a pty starts without NOFLSH)."""
    master, slave = os.openpty()
    stream = open(slave, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
    try:
        yield stream
    finally:
        stream.close()
        os.close(master)


def local_modes(stream: io.TextIOWrapper) -> int:
    return termios.tcgetattr(stream.fileno())[_LFLAG]


def set_local_modes(stream: io.TextIOWrapper, flags: int) -> None:
    attributes = termios.tcgetattr(stream.fileno())
    attributes[_LFLAG] = flags
    termios.tcsetattr(stream.fileno(), termios.TCSANOW, attributes)


def test_noflsh_is_set_while_the_block_runs_and_cleared_after(
    terminal: io.TextIOWrapper,
) -> None:
    assert not local_modes(terminal) & termios.NOFLSH
    with output_kept_on_interrupt(terminal):
        assert local_modes(terminal) & termios.NOFLSH
    assert not local_modes(terminal) & termios.NOFLSH


def test_the_flag_is_put_back_when_the_block_raises(terminal: io.TextIOWrapper) -> None:
    with pytest.raises(KeyboardInterrupt), output_kept_on_interrupt(terminal):
        raise KeyboardInterrupt
    assert not local_modes(terminal) & termios.NOFLSH


def test_a_terminal_that_had_noflsh_keeps_it(terminal: io.TextIOWrapper) -> None:
    set_local_modes(terminal, local_modes(terminal) | termios.NOFLSH)
    with output_kept_on_interrupt(terminal):
        pass
    assert local_modes(terminal) & termios.NOFLSH


def test_other_modes_changed_inside_the_block_are_left_as_changed(
    terminal: io.TextIOWrapper,
) -> None:
    assert local_modes(terminal) & termios.ECHO
    with output_kept_on_interrupt(terminal):
        set_local_modes(terminal, local_modes(terminal) & ~termios.ECHO)
    modes = local_modes(terminal)
    assert not modes & termios.ECHO
    assert not modes & termios.NOFLSH


def test_streams_that_are_no_terminal_are_left_alone() -> None:
    read_end, write_end = os.pipe()
    with open(write_end, "w") as pipe, output_kept_on_interrupt(pipe):
        pipe.write("through a pipe")
    with open(read_end) as pipe:
        assert pipe.read() == "through a pipe"
    with output_kept_on_interrupt(io.StringIO()):
        pass
