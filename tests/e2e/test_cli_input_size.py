"""What `tether run` sends of a large input, against the real daemon and the scripted model
server that records every request: a prompt too large for the model is refused before anything
is sent, and piped context that is cut says so."""

from pathlib import Path

import pytest

from tests.support import DaemonProcess, Home, run_cli
from tether.clients.cli.piped import PIPED_HEAD, PIPED_TAIL
from tether.protocol.methods import SESSION_LIST
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

LOG = "".join(f"line {n}: some log output that goes on\n" for n in range(20_000))
"""About 800 KB: under what the CLI reads of stdin whole (1 MB), far over what the model
takes."""


def sessions(daemon: DaemonProcess) -> set[str]:
    with daemon.client() as client:
        return {s.id for s in client.call(SESSION_LIST).sessions}


def test_a_prompt_too_large_for_the_model_is_refused_with_its_size_and_nothing_is_sent(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    before = sessions(daemon)
    done = run_cli(home, "run", "-w", str(workspace), stdin=LOG)
    assert done.returncode == 1, done.stderr
    prompt = LOG.strip()  # what a piped prompt becomes
    tokens = round(len(prompt) / 3.5)
    assert f"the message is about {tokens:,} tokens ({len(prompt):,} characters)" in done.stderr
    assert "`head -c 50000`" in done.stderr
    assert "`--max-input TOKENS`" in done.stderr
    assert model_server.requests == []
    assert sessions(daemon) == before  # no empty session left behind


def test_eight_megabytes_piped_in_as_the_prompt_are_refused_and_nothing_is_sent(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    big = LOG * 10
    done = run_cli(home, "run", "-w", str(workspace), stdin=big)
    assert done.returncode == 1, done.stderr
    skipped = len(big) - PIPED_HEAD - PIPED_TAIL
    assert done.stderr.startswith(
        f"tether: stdin: {len(big):,} bytes, of which the middle {skipped:,} are left out of"
        " what is sent\ntether: the message is about "
    )
    assert "nothing was sent" in done.stderr
    assert model_server.requests == []


def test_max_input_lets_a_larger_prompt_through(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    prompt = "x" * 100_000  # ~28,600 tokens: over the default 24,371, within the 48,742 budget
    refused = run_cli(home, "run", "-w", str(workspace), stdin=prompt)
    assert refused.returncode == 1
    assert "over the limit of 24,371 tokens" in refused.stderr
    assert model_server.requests == []
    done = run_cli(home, "run", "--max-input", "40000", "-w", str(workspace), stdin=prompt)
    assert done.returncode == 0, done.stderr
    (request,) = model_server.requests
    assert request["messages"][-1]["content"].count("x") == len(prompt)


def test_piped_context_that_is_cut_says_how_much_and_the_model_gets_the_cut(
    daemon: DaemonProcess, home: Home, workspace: Path, model_server: ModelServer
) -> None:
    done = run_cli(home, "run", "-w", str(workspace), "review this", stdin=LOG)
    assert done.returncode == 0, done.stderr
    assert (
        f"tether: stdin: {len(LOG):,} characters, attached cut to 40,000"
        f" ({len(LOG) - 40_000:,} left out of the middle"
    ) in done.stderr
    (request,) = model_server.requests
    sent = request["messages"][-1]["content"]
    assert "review this" in sent
    assert 40_000 < len(sent) < 45_000
