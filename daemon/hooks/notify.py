"""Notifications: a word to the user when a turn needs them and no client saw it.

Rules:
- The events: `approval_requested` (a call waits for a person's answer) and `turn_end` (a
  turn ended `completed`, `failed` or `paused`; a cancelled turn was ended by someone, and an
  interrupted one by the daemon's stop, so neither is notified).
- Seen: an event is seen when a client attached to its session as controller was sent it
  (it was attached when the event happened), or attaches within `notify_after` seconds
  (attaching shows it: a pending approval is in the snapshot or the replay). The caller
  decides the first (`schedule` is not called) and reports the second (`seen`).
- An event not seen within `notify_after` seconds is notified once: the command and the URL
  of the settings its turn read. An approval answered within the wait (or denied because the
  turn ended) is not notified (`cancel`).
- The command runs as the user, outside any sandbox, like a hook: the event's JSON on stdin,
  its `message` as the last argument, `TETHER_NOTIFY_EVENT` in its environment (the turn's
  environment, secret-looking variables removed), in a process group the daemon owns, stopped
  after `COMMAND_TIMEOUT` seconds. The URL gets the JSON in a POST, its `title` as the
  `Title` header (what ntfy shows as the title), within `POST_TIMEOUT` seconds.
- A notification that fails is logged; nothing else notices. It never touches a turn.
- The settings come from the user's own config only (a workspace's `.tether/config.toml`
  cannot set them, as it cannot set hooks).
"""

import os
import shlex
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
import msgspec
import trio

from tether.daemon.config.settings import Config
from tether.daemon.logs.log import get_logger
from tether.daemon.procs.env import command_env
from tether.daemon.procs.foreground import run_to_completion
from tether.daemon.procs.ownership import OwnedGroups
from tether.protocol.events import ApprovalKind, ApprovalRequest, TurnEndStatus, TurnError

log = get_logger(__name__)

DEFAULT_COMMAND = ("notify-send", "tether")
"""The command when `notify` is unset, where a desktop can show it (`default_command`)."""
COMMAND_TIMEOUT = 10.0
"""Seconds the notify command may run before its process tree is stopped."""
POST_TIMEOUT = 5.0
"""Seconds the POST to `notify_url` may take (connecting, sending, the answer)."""
EVENT_VARIABLE = "TETHER_NOTIFY_EVENT"
MESSAGE_CHARS = 200
"""A notification's `message` is cut to this many characters."""

NotifyEventName = Literal["approval_requested", "turn_end"]


class NotifyApproval(msgspec.Struct, frozen=True, kw_only=True):
    """The call an `approval_requested` notification is about."""

    id: str
    tool: str
    kind: ApprovalKind
    reason: str
    command: str = ""
    path: str = ""
    subagent: str = ""


class NotifyEvent(msgspec.Struct, frozen=True, kw_only=True):
    """What a notification carries: the JSON on the command's stdin and in the POST."""

    event: NotifyEventName
    title: str
    """A few words, ASCII: `tether: approval needed`, `tether: turn completed`, …"""
    message: str
    """One line for a person: what, where (the workspace's folder and the session's title)."""
    session_id: str
    session_title: str
    turn_id: str
    workspace: str
    at: float
    """When it happened, seconds since the Unix epoch."""
    status: TurnEndStatus | None = None
    """`turn_end`: `completed`, `failed` or `paused`."""
    error: TurnError | None = None
    """`turn_end`: why it failed or paused."""
    approval: NotifyApproval | None = None
    """`approval_requested`: the call that asks."""


encode = msgspec.json.Encoder().encode


def _line(text: str) -> str:
    """`text` on one line, cut to `MESSAGE_CHARS`, without control characters."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 1] + "…"


def _where(workspace: Path, session_title: str) -> str:
    return f"{workspace.name} ({session_title})" if session_title else workspace.name


def approval_event(
    request: ApprovalRequest, *, session_id: str, session_title: str, workspace: Path
) -> NotifyEvent:
    target = request.command or request.path
    what = f"{request.tool} {target}" if target else request.tool
    return NotifyEvent(
        event="approval_requested",
        title="tether: approval needed",
        message=_line(f"Approval needed in {_where(workspace, session_title)}: {what}"),
        session_id=session_id,
        session_title=session_title,
        turn_id=request.turn_id,
        workspace=str(workspace),
        at=request.requested_at,
        approval=NotifyApproval(
            id=request.id,
            tool=request.tool,
            kind=request.kind,
            reason=request.reason,
            command=request.command,
            path=request.path,
            subagent=request.subagent,
        ),
    )


def turn_end_event(
    turn_id: str,
    status: TurnEndStatus,
    error: TurnError | None,
    *,
    session_id: str,
    session_title: str,
    workspace: Path,
    at: float,
) -> NotifyEvent:
    message = f"Turn {status} in {_where(workspace, session_title)}"
    if error is not None:
        message += f": {error.message}"
    return NotifyEvent(
        event="turn_end",
        title=f"tether: turn {status}",
        message=_line(message),
        session_id=session_id,
        session_title=session_title,
        turn_id=turn_id,
        workspace=str(workspace),
        at=at,
        status=status,
        error=error,
    )


NOTIFIED_ENDS: frozenset[TurnEndStatus] = frozenset({"completed", "failed", "paused"})
"""The ends of a turn that are notified."""


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """What a turn's notifications do, from the settings it read."""

    command: tuple[str, ...] = ()
    """The argv the message is appended to; empty: no command."""
    url: str = ""
    after: float = 10.0
    env: Mapping[str, str] | None = None
    """The environment the command starts from (None: the daemon's)."""
    cwd: Path = field(default_factory=Path.home)

    @property
    def enabled(self) -> bool:
        return bool(self.command or self.url)


def default_command(env: Mapping[str, str]) -> tuple[str, ...]:
    """`DEFAULT_COMMAND` where `env` has a graphical session (DISPLAY or WAYLAND_DISPLAY)
    and notify-send on its PATH, else none."""
    if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return ()
    if shutil.which(DEFAULT_COMMAND[0], path=env.get("PATH", os.defpath)) is None:
        return ()
    return DEFAULT_COMMAND


def notify_settings(config: Config, *, env: Mapping[str, str] | None, cwd: Path) -> NotifySettings:
    """The notifications of a turn under `config` whose commands run in `env` (None: the
    daemon's environment) and in `cwd`."""
    command = (
        tuple(config.notify)
        if config.notify is not None
        else default_command(os.environ if env is None else env)
    )
    return NotifySettings(
        command=command, url=config.notify_url, after=config.notify_after, env=env, cwd=cwd
    )


Deliver = Callable[[NotifyEvent, NotifySettings], Awaitable[None]]


@dataclass(slots=True)
class NotifierStatistics:
    pending: int
    """Events waiting to be seen."""
    delivered: int
    """Events notified (whether or not their command or POST succeeded)."""
    cancelled: int
    """Events seen or answered before their wait was over."""


class Notifier:
    """The daemon's pending notifications, each waiting `notify_after` seconds in a task of
    `serve`'s nursery."""

    def __init__(self, *, owned: OwnedGroups | None = None, deliver: Deliver | None = None) -> None:
        """`owned` records the commands' process groups; `deliver` notifies (default: the
        command and the POST; a test may record instead)."""
        self.owned = owned
        self._deliver: Deliver = deliver or self.deliver
        self._nursery: trio.Nursery | None = None
        self._pending: dict[str, tuple[str, trio.CancelScope]] = {}
        """Pending events by key (an approval's or a turn's id): their session and wait."""
        self._delivered = 0
        self._cancelled = 0
        self._delivering = 0
        self._quiet = trio.Event()
        self._quiet.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the waits and the deliveries until cancelled, which drops them."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def wait_quiet(self) -> None:
        """Return once no event is pending and no notification is being delivered."""
        await self._quiet.wait()

    def _changed(self) -> None:
        if self._pending or self._delivering:
            if self._quiet.is_set():
                self._quiet = trio.Event()
        else:
            self._quiet.set()

    def statistics(self) -> NotifierStatistics:
        return NotifierStatistics(
            pending=len(self._pending), delivered=self._delivered, cancelled=self._cancelled
        )

    def schedule(self, key: str, event: NotifyEvent, settings: NotifySettings) -> None:
        """Notify `event` (of `event.session_id`) once `settings.after` seconds have passed,
        unless `cancel(key)` or `seen` comes first. Nothing when the settings notify nothing,
        the notifier does not serve, or `key` is pending already (one event, one notice)."""
        if not settings.enabled or self._nursery is None or key in self._pending:
            return
        scope = trio.CancelScope()
        self._pending[key] = (event.session_id, scope)
        self._changed()
        self._nursery.start_soon(self._wait, key, scope, event, settings)

    def cancel(self, key: str) -> None:
        """The event `key` no longer needs anyone (its approval was answered)."""
        entry = self._pending.pop(key, None)
        if entry is not None:
            entry[1].cancel()
            self._cancelled += 1
            self._changed()

    def seen(self, session_id: str) -> None:
        """A controller is attached to `session_id`: its pending events are seen."""
        for key in [k for k, (owner, _) in self._pending.items() if owner == session_id]:
            self.cancel(key)

    async def _wait(
        self, key: str, scope: trio.CancelScope, event: NotifyEvent, settings: NotifySettings
    ) -> None:
        with scope:
            await trio.sleep(settings.after)
        if scope.cancel_called or self._pending.get(key, (None, None))[1] is not scope:
            return
        del self._pending[key]
        self._delivered += 1
        self._delivering += 1
        log.info("notifying", notify_event=event.event, session=event.session_id, key=key)
        try:
            await self._deliver(event, settings)
        finally:
            self._delivering -= 1
            self._changed()

    async def deliver(self, event: NotifyEvent, settings: NotifySettings) -> None:
        """Run the command and POST to the URL, side by side; failures are logged."""
        body = encode(event)
        async with trio.open_nursery() as nursery:
            if settings.command:
                nursery.start_soon(self._run_command, event, body, settings)
            if settings.url:
                nursery.start_soon(post_event, settings.url, event, body)

    async def _run_command(self, event: NotifyEvent, body: bytes, settings: NotifySettings) -> None:
        argv = [*settings.command, event.message]
        env = {**command_env(settings.env), EVENT_VARIABLE: event.event}
        try:
            done = await run_to_completion(
                # `exec`: the shell becomes the program, given its arguments as they are.
                "exec " + shlex.join(argv),
                cwd=settings.cwd,
                env=env,
                time_limit=COMMAND_TIMEOUT,
                on_output=lambda _text: None,
                head=1000,
                tail=1000,
                owned=self.owned,
                stdin=body,
                shell="/bin/sh",
            )
        except OSError as exc:
            log.warning("the notify command could not start", command=argv[0], error=str(exc))
            return
        if done.timed_out:
            log.warning(
                "the notify command timed out and was stopped",
                command=argv[0],
                seconds=COMMAND_TIMEOUT,
            )
        elif done.exit_code != 0:
            output = done.output.render(1000, 1000).strip()
            log.warning(
                "the notify command failed",
                command=argv[0],
                exit_code=done.exit_code,
                output=output[-500:],
            )


async def post_event(url: str, event: NotifyEvent, body: bytes) -> None:
    """POST `body` (the JSON of `event`) to `url`; a failure is logged."""
    headers = {
        "Content-Type": "application/json",
        "Title": event.title,
        "User-Agent": "tether",
    }
    try:
        async with httpx.AsyncClient(timeout=POST_TIMEOUT) as client:
            response = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        log.warning("the notify POST failed", url=_shown(url), error=f"{type(exc).__name__}: {exc}")
        return
    if response.is_error:
        log.warning("the notify POST was refused", url=_shown(url), status=response.status_code)


def _shown(url: str) -> str:
    """`url` as logged: without a password or query, which may hold a token."""
    parts = httpx.URL(url)
    return str(parts.copy_with(userinfo=b"", query=None, fragment=None))
