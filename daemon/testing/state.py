"""The server's shared state: the script, the step counter and the recorded requests.

Handler threads record each model request here and claim the next step under one lock, so
concurrent requests never take the same step; waiters on `ServerState.arrived` are woken by
every recorded request.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

from tether.testing.script import JSONObject, Script, Step, first_user_text


class ServerState:
    """The script, the step counter and the recorded requests, shared by handler threads."""

    def __init__(self, script: Script) -> None:
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        """Notified whenever a request is recorded."""
        self.script = script
        self.position = 0
        """Requests answered with a step (the `<request>` of default tool call ids)."""
        self.taken: set[int] = set()
        """The steps taken in this round (every one of them, outside loop mode)."""
        self.requests: list[JSONObject] = []
        self.headers: list[dict[str, str]] = []
        self.abandoned: list[JSONObject] = []
        """Requests whose sender closed the connection before they were read: no step, and
        not among `requests`."""
        self.stopping = threading.Event()
        self.releases = 0
        """`release` calls since the script was set: how many holds a stream may pass."""
        self.released = threading.Condition(self.lock)

    def set_script(self, script: Script) -> None:
        with self.lock:
            self.script = script
            self.position = 0
            self.taken = set()
            self.releases = 0
            self.requests = []
            self.headers = []
            self.abandoned = []

    def record(self, body: JSONObject, headers: dict[str, str]) -> None:
        """Record a request that takes no step (one refused before the script is consulted)."""
        with self.lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.arrived.notify_all()

    def take(
        self, body: JSONObject, headers: dict[str, str], sender_gone: Callable[[], bool]
    ) -> tuple[int, Step | None, Script] | None:
        """Record the request and claim its step: the first not taken yet that it matches
        (None when there is none; in loop mode a new round starts first).

        Returns None, claiming nothing, when `sender_gone()` says the sender has closed its
        connection: a turn cancelled while its request waited to be read. Asked under the
        lock, so a request read after a `set_script` that followed the cancellation cannot
        spend a step of the new script on nobody (the next test's first step, say)."""
        with self.lock:
            if sender_gone():
                self.abandoned.append(body)
                return None
            self.requests.append(body)
            self.headers.append(headers)
            self.arrived.notify_all()
            script = self.script
            ordinal = self.position
            text = first_user_text(body) if any(s.match for s in script.steps) else ""
            index = self._first_match(script, text)
            if index is None and script.loop and self.taken:
                self.taken = set()
                index = self._first_match(script, text)
            if index is None:
                return ordinal, None, script
            self.taken.add(index)
            if script.loop and len(self.taken) == len(script.steps):
                self.taken = set()
            self.position += 1
            return ordinal, script.steps[index], script

    def _first_match(self, script: Script, text: str) -> int | None:
        for index, step in enumerate(script.steps):
            if index not in self.taken and (step.match is None or step.match in text):
                return index
        return None

    def recorded(self) -> list[JSONObject]:
        with self.lock:
            return copy.deepcopy(self.requests)

    def wait_recorded(self, count: int, timeout: float) -> list[JSONObject]:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(
                    f"{len(self.requests)} model requests arrived within {timeout} s, not {count}"
                )
            return copy.deepcopy(self.requests)

    def recorded_abandoned(self) -> list[JSONObject]:
        with self.lock:
            return copy.deepcopy(self.abandoned)

    def recorded_headers(self) -> list[dict[str, str]]:
        with self.lock:
            return [dict(headers) for headers in self.headers]

    def release(self) -> None:
        with self.lock:
            self.releases += 1
            self.released.notify_all()

    def wait_released(self, hold: int) -> bool:
        """Wait until the stream may pass its `hold`-th hold (0-based); return False if the
        server is stopping meanwhile (`stop` sets that without notifying: looked at often)."""
        with self.released:
            while self.releases <= hold:
                if self.stopping.is_set():
                    return False
                self.released.wait(0.05)
        return True

    def sleep_ms(self, milliseconds: float) -> bool:
        """Wait; return False if the server is stopping (the caller should give up)."""
        if milliseconds <= 0:
            return not self.stopping.is_set()
        return not self.stopping.wait(milliseconds / 1000)
