"""Support for in-process tests of the daemon's objects: a subscriber that records what a
session sends it, a bare session over a real store, and the one place those tests build
`Sessions` (so a change of its constructor is adapted here alone)."""

from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio

from tether.daemon.mcp.pool import McpPool
from tether.daemon.providers.openai import OpenAIChatClient
from tether.daemon.sessions.deltas import DeltaFrame
from tether.daemon.sessions.images import ImageStore
from tether.daemon.sessions.models import ModelSource
from tether.daemon.sessions.registry import Sessions
from tether.daemon.sessions.rows import SessionRow
from tether.daemon.sessions.session import Session
from tether.daemon.sessions.store import Store
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.tools.builtin import default_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.events import AnyEvent
from tether.protocol.methods import SessionEventParams
from tether.testing import ModelServer


class _Event(msgspec.Struct):
    params: SessionEventParams


_decode_event = msgspec.json.Decoder(_Event).decode


def decode_event(frame: bytes) -> SessionEventParams:
    """The params of a `session/event` notification frame."""
    return _decode_event(frame).params


def seqs_covered(events: Iterable[SessionEventParams]) -> list[int]:
    """The seqs these notifications stand for, in order: merged deltas stand for
    `first_seq`..`seq`, any other for its `seq`."""
    return [
        seq
        for event in events
        for seq in range(event.seq if event.first_seq is None else event.first_seq, event.seq + 1)
    ]


class Recorder:
    """A subscriber that keeps every frame it is offered; with `room` set, it refuses live
    frames once it holds that many (a client that fell behind)."""

    def __init__(self, room: int | None = None) -> None:
        self.frames: list[bytes] = []
        self.control: list[bytes] = []
        """Frames queued regardless of the limit (resync notices)."""
        self.room = room

    def offer(self, frame: bytes, delta: DeltaFrame | None = None) -> bool:
        if self.room is not None and len(self.frames) >= self.room:
            return False
        self.frames.append(frame)
        return True

    def send_nowait(self, frame: bytes) -> None:
        self.control.append(frame)

    @property
    def seqs(self) -> list[int]:
        return [decode_event(f).seq for f in self.frames]

    @property
    def events(self) -> list[AnyEvent]:
        return [decode_event(f).event for f in self.frames]


class Watcher:
    """A subscriber that decodes every live event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[AnyEvent] = []
        self._changed = trio.Event()

    def offer(self, frame: bytes, delta: DeltaFrame | None = None) -> bool:
        self.events.append(decode_event(frame).event)
        self._changed.set()
        self._changed = trio.Event()
        return True

    def send_nowait(self, frame: bytes) -> None:
        pass

    async def wait_for(self, found: Callable[[AnyEvent], bool]) -> AnyEvent:
        """The first event, seen or to come, that `found` accepts."""
        seen = 0
        while True:
            for event in self.events[seen:]:
                if found(event):
                    return event
            seen = len(self.events)
            await self._changed.wait()


def bare_session(store: Store, session_id: str = "s_1") -> Session:
    """A session with a row in `store` and no turn machinery: the test emits its events."""
    row = SessionRow(session_id, "", 0.0, 0.0, 0, None)
    store.create_session_nowait(row)
    return Session(row, store)


@asynccontextmanager
async def running_sessions(
    store: Store,
    workspace: Path,
    server: ModelServer,
    *,
    keep_idle: int = 4,
    models: ModelSource | None = None,
    skills: SkillLibrary | None = None,
    mcp: McpPool | None = None,
    images: ImageStore | None = None,
) -> AsyncGenerator[Sessions]:
    """`Sessions` over `store`, the default tools and the scripted model server, serving in
    a nursery of its own; running turns are interrupted on the way out. Its turns get their
    settings and clients from `models` when given (the caller closes it), else they all call
    the model server's `scripted` model (or the one a session chose)."""
    client = OpenAIChatClient(base_url=server.base_url, model="scripted")
    sessions = Sessions(
        store=store,
        workspace=workspace,
        model=client,
        models=models,
        tools=ToolRegistry(default_tools()),
        keep_idle=keep_idle,
        model_named=client.with_model,
        skills=skills,
        mcp=mcp,
        images=images,
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(sessions.serve)
            yield sessions
            await sessions.interrupt_all()
            nursery.cancel_scope.cancel()
    finally:
        await client.aclose()
