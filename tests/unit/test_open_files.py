"""The daemon's share of open files: the soft limit raised to the hard one, the cap on
connections waiting for their handshake, and that cap dropping the oldest first."""

import resource
import subprocess
import sys

import pytest

from tether.daemon.rpc.websocket import MAX_PENDING_HANDSHAKES, PendingHandshakes
from tether.daemon.server.limits import RESERVED_DESCRIPTORS, pending_handshake_limit


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from tether.daemon.server.limits import raise_open_file_limit\n"
        "print(*raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    done = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=low_soft_limit,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.split() == ["256", str(hard), str(hard)]


@pytest.mark.parametrize(
    ("open_files", "pending"),
    [(1 << 20, MAX_PENDING_HANDSHAKES), (1024, MAX_PENDING_HANDSHAKES), (256, 32), (160, 8),
     (RESERVED_DESCRIPTORS, 1), (16, 1)],
)  # fmt: skip
def test_pending_handshakes_leave_descriptors_for_the_rest(open_files: int, pending: int) -> None:
    assert pending_handshake_limit(open_files) == pending


async def test_admitting_past_the_limit_cancels_the_oldest() -> None:
    pending = PendingHandshakes(2)
    with pending.admitted() as first, pending.admitted() as second:
        assert len(pending) == 2
        with pending.admitted() as third:
            assert first.cancel_called
            assert not second.cancel_called
            assert not third.cancel_called
            assert len(pending) == 2
            with pending.admitted():
                assert second.cancel_called
                assert not third.cancel_called
    assert len(pending) == 0
    assert pending.dropped == 2


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        PendingHandshakes(0)
