"""The daemon's log writer: owner-only files rotated by size, the ids of the task writing each
line, the level threshold, and the scrubber that masks secrets in every line."""

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tether.daemon.config.settings import ConfigError, apply_environment, parse_config
from tether.daemon.logs import log
from tether.daemon.logs.file import LogFile, rotated
from tether.daemon.logs.scrub import MASK, Scrubber

_log = log.get_logger("tether.daemon.tests.log")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- the file ------------------------------------------------------------------------------


def test_the_file_rotates_by_size_and_keeps_three_older_files(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    file = LogFile(path, max_bytes=100, keep=3)
    lines = [f"{i:02d}".encode() * 20 + b"\n" for i in range(6)]  # 41 bytes: two per file
    for line in lines:
        file.write(line)
    file.close()
    assert path.read_bytes() == b"".join(lines[4:])
    assert rotated(path, 1).read_bytes() == b"".join(lines[2:4])
    assert rotated(path, 2).read_bytes() == b"".join(lines[:2])
    again = LogFile(path, max_bytes=100, keep=3)  # a restart appends to the current file
    for line in [b"x" * 60 + b"\n"] * 3:  # each one rotates
        again.write(line)
    again.close()
    assert not rotated(path, 4).exists(), "the oldest beyond three is deleted"
    assert rotated(path, 3).read_bytes() == b"".join(lines[4:])
    assert {mode(p) for p in tmp_path.iterdir()} == {0o600}


def test_a_wider_file_left_by_an_older_tether_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    path.write_text("old plain text\n")
    path.chmod(0o644)
    file = LogFile(path)
    file.write(b"new\n")
    file.close()
    assert mode(path) == 0o600
    assert path.read_text() == "old plain text\nnew\n", "appended, nothing lost"


def test_a_file_deleted_under_the_writer_is_begun_again(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    file = LogFile(path, max_bytes=10)
    file.write(b"123456789\n")
    path.unlink()  # someone cleans up: the rotation that follows must not fail for good
    file.write(b"abc\n")
    file.write(b"def\n")
    file.close()
    assert path.read_bytes() == b"abc\ndef\n"
    assert file.dropped == 0


# --- records, ids and levels -------------------------------------------------------------


@pytest.fixture
def written(tmp_path: Path) -> Iterator[Path]:
    """The log configured at info into a file; put back as it was afterwards."""
    path = tmp_path / "daemon.log"
    log.configure(LogFile(path), level="info")
    try:
        yield path
    finally:
        log.reset()


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_line_is_one_json_object_with_its_fields(written: Path) -> None:
    _log.info("tool call", tool="read_file", ms=1.5, path=Path("/x/y"), error=ValueError("no"))
    _log.debug("not at info")
    try:
        raise KeyError("boom")
    except KeyError:
        _log.exception("it failed", method="m")
    first, second = records(written)
    assert first["msg"] == "tool call"
    assert (first["level"], first["logger"]) == ("info", "tests.log")
    assert str(first["ts"]).endswith("Z")
    assert (first["tool"], first["ms"], first["path"], first["error"]) == (
        "read_file",
        1.5,
        "/x/y",
        "no",
    )
    assert {"conn", "session", "turn"}.isdisjoint(first), "written outside any context"
    assert second["level"] == "error"
    assert second["error"] == "KeyError: 'boom'"
    assert "raise KeyError" in str(second["traceback"])


async def test_each_task_writes_its_own_ids(written: Path) -> None:
    async def connection(name: str, session: str, ready: trio.Event, go: trio.Event) -> None:
        log.bind(conn=name)
        async with trio.open_nursery() as nursery:
            # A task started before a bind keeps the ids it started with.
            nursery.start_soon(request, go, f"{name} before")
            log.bind(session=session)
            nursery.start_soon(request, go, f"{name} after")
            ready.set()

    async def request(go: trio.Event, what: str) -> None:
        await go.wait()
        _log.info(what)

    go = trio.Event()
    readies = [trio.Event(), trio.Event()]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection, "c1", "s_1", readies[0], go)
        nursery.start_soon(connection, "c2", "s_2", readies[1], go)
        for ready in readies:
            await ready.wait()
        go.set()
    _log.info("outside")
    seen = {str(r["msg"]): (r.get("conn"), r.get("session")) for r in records(written)}
    assert seen == {
        "c1 before": ("c1", None),
        "c1 after": ("c1", "s_1"),
        "c2 before": ("c2", None),
        "c2 after": ("c2", "s_2"),
        "outside": (None, None),
    }


def test_the_level_keeps_lines_at_or_above_it(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    log.configure(LogFile(path), level="warning")
    try:
        _log.debug("d")
        _log.info("i")
        _log.warning("w")
        _log.error("e")
        assert not log.Logger.enabled(log.INFO)
    finally:
        log.reset()
    assert [r["msg"] for r in records(path)] == ["w", "e"]


def test_log_level_comes_from_the_file_then_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    parsed = parse_config(config, 'log_level = "debug"\n')
    assert parsed.log_level == "debug"
    assert apply_environment(parsed, {}).log_level == "debug"
    assert apply_environment(parsed, {"TETHER_LOG_LEVEL": "WARNING"}).log_level == "warning"
    with pytest.raises(ConfigError, match="TETHER_LOG_LEVEL must be one of debug, info"):
        apply_environment(parsed, {"TETHER_LOG_LEVEL": "loud"})
    with pytest.raises(ConfigError, match="log_level"):
        parse_config(config, 'log_level = "loud"\n')


# --- the scrubber -------------------------------------------------------------------------


def test_known_secrets_are_masked_as_written_and_as_json_escapes_them() -> None:
    scrubber = Scrubber(["sk-plain-1234567", 'quo"te\\key-98765', "short"])
    line = json.dumps({"a": 'sk-plain-1234567 and quo"te\\key-98765', "b": "short"}).encode()
    masked = scrubber.scrub(line)
    assert b"sk-plain" not in masked
    assert b"98765" not in masked
    assert masked.count(MASK) == 2
    assert b"short" in masked, "a value this short is not masked"


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abc.def-123_456",
        "{'authorization': 'Basic dXNlcjpwYXNz'}",
        '{"x-api-key": "key-live-777777"}',
        "X-Api-Key=key-live-777777",
        "api_key = key-live-777777",
        "sent bearer tok_9f8e7d6c5b",
    ],
)
def test_header_values_are_masked_whatever_their_spelling(text: str) -> None:
    line = json.dumps({"msg": "m", "detail": text}).encode()
    masked = Scrubber().scrub(line)
    assert MASK in masked, masked
    for secret in ("abc.def-123_456", "dXNlcjpwYXNz", "key-live-777777", "tok_9f8e7d6c5b"):
        assert secret.encode() not in masked
    json.loads(masked)  # still one JSON object


@pytest.mark.parametrize(
    "text",
    [
        "missing or wrong bearer token (see the daemon's discovery file)",
        "authorization required: permission denied",
        "the api key is not set",
    ],
)
def test_prose_that_names_a_header_is_left_alone(text: str) -> None:
    line = json.dumps({"msg": "m", "reason": text}).encode()
    assert Scrubber().scrub(line) == line


def test_the_token_and_keys_told_to_the_log_are_masked_in_every_line(written: Path) -> None:
    log.add_secret("token-0123456789abcdef")
    _log.info("quoting", detail="the token-0123456789abcdef leaked", env=os.environ.get("X"))
    assert "0123456789abcdef" not in written.read_text()
    assert "[redacted]" in written.read_text()


def test_before_it_is_configured_only_warnings_go_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _log.info("quiet")
    _log.warning("loud", n=1)
    err = capsys.readouterr().err
    assert '"msg":"loud","n":1' in err
    assert "quiet" not in err


def test_a_body_is_clipped_from_its_head_alone() -> None:
    short = '{"a": "é"}'.encode()
    assert log.clip_bytes(short) == '{"a": "é"}'
    body = b'{"image": "' + b"A" * 5_000_000 + b'"}'
    clipped = log.clip_bytes(body, limit=100)
    assert clipped == '{"image": "' + "A" * 89 + "… [5,000,013 bytes in all]"
    cut_inside_a_character = "é".encode() * 200  # 2 bytes each: the head may end mid-way
    assert log.clip_bytes(cut_inside_a_character, limit=10) == "é" * 10 + "… [400 bytes in all]"
