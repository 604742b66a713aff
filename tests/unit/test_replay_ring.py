"""The replay ring: bounded in bytes, the oldest frames dropped first, and `since(seq)` exact at
its edges (the first frame held, the last, one before the oldest, an empty ring)."""

from tether.daemon.sessions.replay import EventRing


def frame(seq: int, size: int = 10) -> bytes:
    return f"{seq:04d}".encode().ljust(size, b".")


def filled(first: int, last: int, max_bytes: int = 1000, size: int = 10) -> EventRing:
    ring = EventRing(first_seq=first, max_bytes=max_bytes)
    for seq in range(first, last + 1):
        ring.append(seq, frame(seq, size))
    return ring


def test_an_empty_ring_replays_nothing_from_its_start_and_refuses_earlier_cursors() -> None:
    ring = EventRing(first_seq=41)
    assert ring.since(40) == []
    assert ring.since(41) == []
    assert ring.since(39) is None
    assert ring.statistics() == (0, 0)


def test_since_returns_exactly_the_frames_after_the_cursor() -> None:
    ring = filled(1, 5)
    assert ring.since(0) == [frame(s) for s in range(1, 6)]
    assert ring.since(3) == [frame(4), frame(5)]
    assert ring.since(4) == [frame(5)]
    assert ring.since(5) == []


def test_the_ring_keeps_within_its_bytes_dropping_the_oldest() -> None:
    ring = filled(1, 20, max_bytes=55)
    assert ring.statistics() == (5, 50)
    # A client that saw 15 needs 16 on, the oldest held; one that saw 14 needs the dropped 15.
    assert ring.since(15) == [frame(s) for s in range(16, 21)]
    assert ring.since(14) is None
    assert ring.since(0) is None


def test_a_ring_that_started_after_restored_events_numbers_from_there() -> None:
    ring = filled(101, 103)
    assert ring.since(100) == [frame(101), frame(102), frame(103)]
    assert ring.since(99) is None


def test_one_frame_larger_than_the_budget_is_kept_alone() -> None:
    ring = filled(1, 3, max_bytes=25)
    ring.append(4, frame(4, size=100))
    assert ring.statistics() == (1, 100)
    assert ring.since(3) == [frame(4, size=100)]
    assert ring.since(2) is None
    ring.append(5, frame(5))
    assert ring.statistics() == (1, 10)
    assert ring.since(4) == [frame(5)]
