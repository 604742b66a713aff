"""The model clients that turns call, made from the user's settings as they are when each turn
starts (`tether.daemon.config.live`), so that a changed config file or client environment
applies to the next turn without restarting the daemon.

Rules:
- A turn (or a compaction, or a model listing) takes the settings in effect for the client that
  asked (`settings`) and leases the client for them (`lease`) until it ends: a setting changed
  meanwhile applies from the next turn on, never in the middle of one.
- There is one client per distinct provider settings and model, each with its own connections
  and what it learned about its server and model (tools refused, usage in streams).
- A client no lease holds is closed as soon as its settings (the model aside) are no longer the
  latest leased — the user changed them — and beyond the `keep_idle` most recently used.
  Closing never waits on a turn: a client in use is closed when its last lease ends.
"""

from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import trio

from tether.daemon.config.live import Source, UserSettings
from tether.daemon.config.settings import Config, ConfigError, ProviderConfig
from tether.daemon.providers.base import ModelClient

ClientFactory = Callable[[ProviderConfig], ModelClient]
"""Makes the client for provider settings (their `model` included)."""

KEEP_IDLE = 4
"""Clients kept open while no turn uses them, the most recently used first."""


@dataclass(frozen=True)
class SettingsReport:
    """The settings in effect for a client, and what stands in their way."""

    config: Config
    """In effect now; while the file is invalid, those the daemon started with."""
    sources: Mapping[str, Source] = field(default_factory=dict[str, Source])
    """Where `model` and `base_url` come from (see `UserSettings.sources`)."""
    error: str = ""
    """Why the user's config cannot be used now (empty: it can)."""
    restart_needed: list[str] = field(default_factory=list[str])
    config_file: str = ""


class ModelSource(Protocol):
    """Where turns get their settings and model clients."""

    async def settings(self, client_env: Mapping[str, str] | None) -> Config:
        """The settings in effect for a client that sent `client_env` (None: it sent none).
        Raises `ConfigError` while the user's config is invalid."""
        ...

    def lease(self, provider: ProviderConfig) -> AbstractAsyncContextManager[ModelClient]:
        """The client for `provider`, held until the context ends."""
        ...

    async def report(self, client_env: Mapping[str, str] | None) -> SettingsReport:
        """The settings in effect for the client and where they come from; never raises
        `ConfigError` (it is reported)."""
        ...

    async def aclose(self) -> None:
        """Close every client (the daemon is stopping)."""
        ...


class _Entry:
    __slots__ = ("client", "leases", "settings")

    def __init__(self, client: ModelClient, settings: bytes) -> None:
        self.client = client
        self.settings = settings
        self.leases = 0


def _key(provider: ProviderConfig) -> tuple[bytes, bytes]:
    """(the settings but the model, the whole settings). Whether the model takes images is
    the model's, not the settings': it is left out with the model."""
    whole = msgspec.json.encode(provider)
    return msgspec.json.encode(msgspec.structs.replace(provider, model="", images=None)), whole


class ModelPool:
    """Clients made by `factory` for the settings `user` reads (see the module rules)."""

    def __init__(
        self, user: UserSettings, factory: ClientFactory, *, keep_idle: int = KEEP_IDLE
    ) -> None:
        self.user = user
        self._factory = factory
        self._keep_idle = keep_idle
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        """Least recently leased first."""
        self._latest = b""

    async def settings(self, client_env: Mapping[str, str] | None) -> Config:
        return await trio.to_thread.run_sync(self.user.read, client_env)

    async def report(self, client_env: Mapping[str, str] | None) -> SettingsReport:
        return await trio.to_thread.run_sync(self._report, client_env)

    def _report(self, client_env: Mapping[str, str] | None) -> SettingsReport:
        user = self.user
        try:
            config = user.read(client_env)
            return SettingsReport(
                config=config,
                sources=user.sources(client_env),
                restart_needed=user.restart_needed(config),
                config_file=str(user.path),
            )
        except ConfigError as exc:
            return SettingsReport(config=user.started, error=str(exc), config_file=str(user.path))

    @property
    def open_count(self) -> int:
        """Clients open now (in use or kept)."""
        return len(self._entries)

    @asynccontextmanager
    async def lease(self, provider: ProviderConfig) -> AsyncGenerator[ModelClient]:
        settings, whole = _key(provider)
        entry = self._entries.get(whole)
        if entry is None:
            entry = self._entries[whole] = _Entry(self._factory(provider), settings)
        self._entries.move_to_end(whole)
        self._latest = settings
        entry.leases += 1
        try:
            await self._close_idle()
            yield entry.client
        finally:
            entry.leases -= 1
            await self._close_idle()

    async def _close_idle(self) -> None:
        idle = [(key, e) for key, e in self._entries.items() if e.leases == 0]
        stale = [(key, e) for key, e in idle if e.settings != self._latest]
        kept = [(key, e) for key, e in idle if e.settings == self._latest]
        closing = stale + kept[: max(0, len(kept) - self._keep_idle)]
        for key, _ in closing:
            del self._entries[key]
        # Shielded: a cancelled turn still closes what it no longer needs.
        with trio.CancelScope(shield=True):
            for _, entry in closing:
                await entry.client.aclose()

    async def aclose(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        with trio.CancelScope(shield=True):
            for entry in entries:
                await entry.client.aclose()


class FixedModel:
    """One client for every turn, whatever the settings, and `config` as the settings (for
    tests and benchmarks that bring their own client). A session's own model gets
    `model_named(name)`, made once per name; the caller closes the clients."""

    def __init__(
        self,
        client: ModelClient,
        config: Config,
        model_named: Callable[[str], ModelClient] | None = None,
    ) -> None:
        self.client = client
        self.config = msgspec.structs.replace(
            config, provider=msgspec.structs.replace(config.provider, model=client.model)
        )
        self._model_named: Callable[[str], ModelClient] = model_named or (lambda _name: client)
        self._named: dict[str, ModelClient] = {}

    async def settings(self, client_env: Mapping[str, str] | None) -> Config:
        return self.config

    async def report(self, client_env: Mapping[str, str] | None) -> SettingsReport:
        return SettingsReport(config=self.config)

    @asynccontextmanager
    async def lease(self, provider: ProviderConfig) -> AsyncGenerator[ModelClient]:
        if provider.model == self.client.model:
            yield self.client
            return
        named = self._named.get(provider.model)
        if named is None:
            named = self._named[provider.model] = self._model_named(provider.model)
        yield named

    async def aclose(self) -> None:
        pass
