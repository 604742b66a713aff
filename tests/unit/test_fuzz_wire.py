"""The daemon's wire under a property-based fuzzer (`tests/wire_fuzz.py`): frames drawn from
the committed JSON Schema and mutations of them, sent to the real daemon (a subprocess: its
staying alive is one of the properties) over a real websocket. Derandomized, so every run
sends the same frames; `bench/fuzz_wire.py` is the long form.

Each frame's answer is held to the oracle in `tests/wire_fuzz.py`; a finding fails the test
with the frame that caused it. The daemon's log must hold no traceback afterwards: a handler
that failed is a bug even when the client got a typed answer.
"""

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support import DaemonProcess, create_session
from tests.wire_fuzz import (
    SESSION_IDS,
    Frame,
    Fuzzer,
    frames,
    load_schema,
    oversize_frame,
    pid_alive,
)
from tether.testing import ModelServer

pytestmark = pytest.mark.shared_daemon

SCHEMA = load_schema()
LOOPING = {"loop": True, "steps": [{"text": "ok"}]}


@pytest.fixture
def fuzzer(daemon: DaemonProcess, model_server: ModelServer) -> Iterator[Fuzzer]:
    model_server.set_script(LOOPING)
    client = daemon.client("fuzz-setup")
    SESSION_IDS[:] = [create_session(client)]
    client.close()
    pid = daemon.proc.pid
    fuzzer = Fuzzer(daemon.port, daemon.token, pid, lambda: pid_alive(pid))
    yield fuzzer
    fuzzer.close()
    log = daemon.home.log_path(daemon.workspace).read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 200 :][:3000]


def test_every_frame_gets_a_typed_answer_or_none_and_the_next_request_is_answered(
    fuzzer: Fuzzer,
) -> None:
    @settings(
        max_examples=300,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(frames(SCHEMA))
    def send(frame: Frame) -> None:
        fuzzer.check(frame)

    send()
    assert fuzzer.tally.outcomes.get("result", 0) > 0
    assert fuzzer.tally.outcomes.get("error", 0) > 0
    assert fuzzer.tally.outcomes.get("no answer", 0) > 0


def test_a_frame_over_the_size_limit_closes_with_1009_and_a_new_connection_is_served(
    fuzzer: Fuzzer,
) -> None:
    fuzzer.check(oversize_frame())
    assert fuzzer.tally.outcomes == {"closed 1009": 1}
    fuzzer.check(Frame(b'{"jsonrpc":"2.0","id":1,"method":"daemon/status"}', "valid"))
    assert fuzzer.tally.outcomes["result"] == 1
