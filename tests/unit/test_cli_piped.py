"""Text piped into `tether run`, read from a real pipe."""

import os
import threading
from collections.abc import Generator
from contextlib import contextmanager
from typing import BinaryIO

import pytest

from tether.clients.cli.exit_codes import EXIT_USAGE, CliError
from tether.clients.cli.piped import PIPED_HEAD, PIPED_TAIL, read_piped


@contextmanager
def pipe_of(data: bytes) -> Generator[BinaryIO]:
    """The reading end of an OS pipe that a thread fills with `data`, then closes."""
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with open(write_fd, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    with open(read_fd, "rb") as stream:
        yield stream
    writer.join()


def test_stdin_that_cannot_hold_text_is_not_read() -> None:
    with pipe_of(b"ignored") as stream:
        assert read_piped(stream, may_hold_text=False) is None
        stream.read()
    assert read_piped(None, may_hold_text=True) is None


def test_piped_text_is_read_whole_and_decoded() -> None:
    text = "naïve café\n" * 1000
    with pipe_of(text.encode()) as stream:
        assert read_piped(stream, may_hold_text=True) == text


def test_a_long_pipe_keeps_its_head_and_tail_and_marks_the_cut() -> None:
    data = b"h" * PIPED_HEAD + b"m" * 3_000_000 + b"t" * PIPED_TAIL
    with pipe_of(data) as stream:
        text = read_piped(stream, may_hold_text=True)
    assert text == "h" * PIPED_HEAD + "\n[… 3,000,000 bytes of piped input left out …]\n" + (
        "t" * PIPED_TAIL
    )


def test_binary_input_is_refused() -> None:
    with pipe_of(b"\x89PNG\r\n\x1a\n\0\0\0") as stream, pytest.raises(CliError) as refused:
        read_piped(stream, may_hold_text=True)
    assert refused.value.code == EXIT_USAGE
