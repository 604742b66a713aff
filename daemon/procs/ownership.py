"""A durable record of the process groups the daemon owns, so that a daemon started after a
crash can stop what the dead one left running.

The record is a small owner-only file per workspace (in the user state dir) of JSON lines,
one per change: a group added (with the boot id) or removed. Appending a line is one `write`,
which the daemon's death cannot tear; a torn last line (the machine's death can) is skipped
on reading. The file is rewritten whole, atomically (a temporary file, then `os.replace`), when
a daemon takes it over at start-up and every `COMPACT_AFTER` lines. Not a rewrite per change:
on ext4, renaming over a file flushes its data (`auto_da_alloc`), ~3 ms a time. Nothing is
fsynced: the record must outlive the daemon, not the machine, and a reboot ends every process
anyway (a group recorded under another boot id is dropped).

Each group is recorded with:
- `pgid`, the leader's pid (every command is a session and group leader);
- `start`, the leader's start time (field 22 of /proc/PID/stat, clock ticks since boot);
- `tag`, a random value put in the command's environment (`TAG_VARIABLE`) and inherited by
  everything it starts.

Deciding that a group found at start-up is still ours, never killing a stranger's:
- A pid number stays reserved while it is the id of a live process group or session, so
  group N cannot be handed to someone else while a member of ours is alive. It can be reused
  only once every member of ours is gone: if the kernel then gives pid N to a new process
  that makes its own group, that group is a stranger's.
- So group N is ours when its leader is alive with the recorded start time (a reused pid has
  a later one), or when a member carries our tag in its environment (only our command's
  descendants have it). After a crash the leader is usually gone (the death signal killed it)
  and the tag is what proves ownership.
- Start times of the other members cannot prove anything: members of a reused group also
  started after our leader. A member that cleared its environment and outlived its leader
  therefore cannot be recognised, and is left alone (with a log line), as is any group that
  cannot be confirmed.

Who kills what when the daemon dies: a `Watchdog` (`tether.daemon.procs.watchdog`) sends SIGKILL
to every group this record proves is still ours, the moment the daemon is gone (`guarded`);
without one, each leader has the death signal (`tether.daemon.procs.spawn`). Either way a
daemon started later stops whatever is left (`take_over`).

Appending is one `write` and `take_over` reads /proc (milliseconds, at start-up): the methods
are safe to call from any thread (a lock keeps the writes in order); `take_over` belongs on the
owner thread (`tether.daemon.procs.spawn.OWNER_THREAD`), `add` and `remove` may run anywhere.
"""

import contextlib
import os
import secrets
import threading
from pathlib import Path

import msgspec

from tether.daemon.logs.log import get_logger

log = get_logger(__name__)

TAG_VARIABLE = "TETHER_PROCESS_GROUP"
"""Environment variable that marks a command's processes as the daemon's."""
COMPACT_AFTER = 1000
"""Lines appended before the record is rewritten with only the groups still owned."""
_PROC = Path("/proc")


class GroupRecord(msgspec.Struct, frozen=True, kw_only=True):
    pgid: int
    start: int
    tag: str
    command: str = ""


class RecordLine(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One change: `add` (recorded under `boot_id`) or `remove` (a pgid)."""

    add: GroupRecord | None = None
    boot_id: str = ""
    remove: int | None = None


_decode_line = msgspec.json.Decoder(RecordLine).decode
_encode = msgspec.json.Encoder().encode


def new_tag() -> str:
    return secrets.token_hex(12)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after `comm` (field 3, the state, first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # pid (comm) state ...: comm may hold spaces and parentheses.
    return raw[raw.rfind(b")") + 2 :].split()


def start_time(pid: int) -> int:
    """The start time of process `pid` (field 22 of /proc/PID/stat), 0 when unknown."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def _carries(pid: int, tag: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            entries = environ.read().split(b"\0")
    except OSError:
        return False
    return f"{TAG_VARIABLE}={tag}".encode() in entries


def _live_by_group(pgids: set[int]) -> dict[int, list[tuple[int, int]]]:
    """For each of `pgids`, its members that are not zombies, as (pid, start time)."""
    found: dict[int, list[tuple[int, int]]] = {pgid: [] for pgid in pgids}
    if not _PROC.is_dir():
        return found
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if not fields or len(fields) <= 19 or fields[0] in (b"Z", b"X"):
            continue
        pgid = int(fields[2])
        if pgid in found:
            found[pgid].append((int(entry.name), int(fields[19])))
    return found


def confirmed(recorded: dict[int, GroupRecord]) -> list[GroupRecord]:
    """Of the `recorded` groups, those that are still ours and have live members (see the
    rules above); a group that cannot be confirmed is left out, with a log line. Reads /proc:
    blocking."""
    members = _live_by_group(set(recorded)) if recorded else {}
    found: list[GroupRecord] = []
    for record in recorded.values():
        live = members[record.pgid]
        if not live:
            continue
        leader = (record.pgid, record.start)
        if leader in live or any(_carries(pid, record.tag) for pid, _ in live):
            found.append(record)
        else:
            log.warning(
                "a process group of the previous daemon could not be confirmed as its own;"
                " leaving it alone",
                pgid=record.pgid,
                command=record.command,
            )
    return found


class OwnedGroups:
    """The groups the daemon owns, mirrored to `path` (None: kept in memory only).

    Every method blocks (briefly, but for `take_over`); all are thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.guarded = False
        """Whether a watchdog will kill the recorded groups when the daemon dies, so that a
        new leader needs no death signal of its own (set by `tether.daemon.procs.watchdog`;
        never with `path` None)."""
        self._groups: dict[int, GroupRecord] = {}
        self._unsignalled: set[int] = set()
        self._boot = boot_id()
        self._fd: int | None = None
        self._lines = 0
        self._lock = threading.Lock()

    def add(self, record: GroupRecord, *, death_signal: bool = True) -> None:
        """Record a group whose leader just started; `death_signal`: whether the leader has
        one (False: only a watchdog kills it when the daemon dies)."""
        with self._lock:
            self._groups[record.pgid] = record
            if not death_signal:
                self._unsignalled.add(record.pgid)
            self._append(RecordLine(add=record, boot_id=self._boot))

    def remove(self, pgid: int) -> None:
        with self._lock:
            self._unsignalled.discard(pgid)
            if self._groups.pop(pgid, None) is not None:
                self._append(RecordLine(remove=pgid))

    def records(self) -> list[GroupRecord]:
        with self._lock:
            return list(self._groups.values())

    def unsignalled(self) -> int:
        """How many recorded groups have a leader without a death signal."""
        with self._lock:
            return len(self._unsignalled)

    def take_over(self) -> list[GroupRecord]:
        """Read what a previous daemon recorded and return its groups that are still ours and
        still have live members; they stay recorded until `remove`d (after being stopped).
        Groups that are gone or cannot be confirmed are dropped from the record."""
        previous = self.read()
        found = confirmed(previous)
        with self._lock:
            for record in found:
                self._groups.setdefault(record.pgid, record)
            if self.path is not None and (previous or self.path.exists()):
                self._compact()
        return found

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def read(self) -> dict[int, GroupRecord]:
        """The groups the file records for this boot (not what this object holds: what a
        daemon that died would have left)."""
        groups: dict[int, GroupRecord] = {}
        if self.path is None:
            return groups
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return groups
        except OSError as exc:
            log.warning("ignoring the unreadable process record", path=self.path, error=exc)
            return groups
        for raw in data.splitlines():
            try:
                line = _decode_line(raw)
            except msgspec.DecodeError:
                continue  # torn by a crash of the machine, or not ours
            if line.add is not None and line.boot_id == self._boot:
                groups[line.add.pgid] = line.add
            elif line.remove is not None:
                groups.pop(line.remove, None)
        return groups

    def _append(self, line: RecordLine) -> None:
        if self.path is None:
            return
        if self._lines >= COMPACT_AFTER:
            self._compact()  # writes the current groups, this change included
            return
        try:
            if self._fd is None:
                self._fd = self._open_for_append(self.path)
            os.write(self._fd, _encode(line) + b"\n")
            self._lines += 1
        except OSError as exc:
            # The commands run all the same; only the clean-up after a crash is lost.
            log.warning("could not write the process record", path=self.path, error=exc)

    @staticmethod
    def _open_for_append(path: Path) -> int:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(fd).st_size
        # After a torn last line, start a new one rather than extend the broken one.
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
        return fd

    def _compact(self) -> None:
        assert self.path is not None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        lines = [RecordLine(add=record, boot_id=self._boot) for record in self._groups.values()]
        data = b"".join(_encode(line) + b"\n" for line in lines)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, self.path)
            self._lines = len(lines)
        except OSError as exc:
            log.warning("could not write the process record", path=self.path, error=exc)
            with contextlib.suppress(OSError):
                temporary.unlink()
