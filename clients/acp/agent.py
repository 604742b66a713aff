"""`tether acp`: an Agent Client Protocol (v1) agent on stdio, backed by the workspace daemons.

An ACP session is a tether session, under the same id: `session/new` creates one in the
daemon of the workspace its `cwd` is in (the git root above it, as the CLI finds it, started
when none runs), `session/load` and `session/resume` attach to one, `session/list` lists a
workspace's. Every session this process opened stays attached as a controller, so what any
client does in it (a turn the CLI starts, an approval answered in another editor) reaches
the editor as `session/update`s (see `updates`), and the CLI sees what the editor does.
Each open session is an `AcpSession` (see `session`, which draws how the threads and the
approvals go); `prompt` makes a prompt's `turn/start`. The MCP servers the editor passes in
`session/new` and `session/load` are given to the session (`mcp`): this connection's, they
stop when it closes the session or goes.
"""

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether.clients.acp import params as p
from tether.clients.acp.mcp import session_servers
from tether.clients.acp.peer import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    AcpError,
    Peer,
)
from tether.clients.acp.session import LOST, AcpSession, Link, log
from tether.clients.acp.updates import JSON
from tether.clients.core.call_error import CallError
from tether.clients.core.channel import SharedClient
from tether.clients.core.discovery import DaemonUnavailable, find_workspace
from tether.clients.core.websocket import WebSocketError
from tether.protocol.errors import ErrorCode
from tether.protocol.methods import (
    SESSION_CONFIGURE,
    SESSION_CREATE,
    SESSION_LIST,
    SessionConfigureParams,
    SessionCreateParams,
    SessionDeletedParams,
    SessionEventParams,
    SessionMcpServer,
    SessionResyncParams,
)
from tether.protocol.session import SessionSnapshot
from tether.protocol.version import __version__

PROTOCOL_VERSION = 1
"""The ACP version spoken."""


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class Agent:
    """The `peer.Handler` of one editor connection."""

    def __init__(self, peer: Peer, default_workspace: Path) -> None:
        self.peer = peer
        self.default_workspace = default_workspace
        self.client_name = "tether-acp"
        self._lock = threading.Lock()
        self._links: dict[Path, Link] = {}
        self._sessions: dict[str, AcpSession] = {}

    def spawn(self, work: Callable[[], None]) -> None:
        threading.Thread(target=work, name="acp-work", daemon=True).start()

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        """A daemon call, its failure said the ACP way."""
        try:
            return method(*args)
        except CallError as exc:
            if exc.code == ErrorCode.SESSION_NOT_FOUND:
                raise AcpError(RESOURCE_NOT_FOUND, exc.message) from exc
            if exc.code == ErrorCode.INVALID_PARAMS:
                raise AcpError(INVALID_PARAMS, exc.message) from exc
            raise AcpError(INTERNAL_ERROR, exc.message, {"tetherCode": exc.code}) from exc
        except (WebSocketError, OSError) as exc:
            raise AcpError(INTERNAL_ERROR, f"{LOST}: {exc}") from exc

    # --- the daemons ------------------------------------------------------------------------

    def link(self, cwd: str) -> Link:
        folder = Path(cwd)
        if not folder.is_absolute():
            raise AcpError(INVALID_PARAMS, f"cwd must be an absolute path, not {cwd!r}")
        if not folder.is_dir():
            raise AcpError(INVALID_PARAMS, f"{cwd} is not a directory")
        workspace = find_workspace(folder)
        with self._lock:
            link = self._links.get(workspace)
            if link is not None and link.alive:
                return link
            try:
                client = SharedClient.connect(workspace, client_name=self.client_name)
            except (DaemonUnavailable, CallError, WebSocketError, OSError) as exc:
                raise AcpError(INTERNAL_ERROR, f"no tether daemon for {workspace}: {exc}") from exc
            link = self._links[workspace] = Link(workspace, client, self._route)
            return link

    def _route(self, link: Link, method: str, params: object) -> None:
        """A notification from `link`'s daemon (method "" once the connection is lost)."""
        if not method:
            with self._lock:
                lost = [s for s in self._sessions.values() if s.link is link]
            for session in lost:
                session.lost()
            return
        session_id = getattr(params, "session_id", None)
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.link is not link:
            return
        match params:
            case SessionEventParams():
                session.on_event(params)
            case SessionResyncParams():
                self.spawn(session.resync)
            case SessionDeletedParams():
                with self._lock:
                    self._sessions.pop(session.id, None)
                session.lost()
            case _:
                pass

    def _open(self, session_id: str, link: Link) -> AcpSession:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.link is not link:
                session = self._sessions[session_id] = AcpSession(self, session_id, link)
            return session

    def close(self) -> None:
        """The editor is gone: close the connections (running turns go on in the daemon)."""
        with self._lock:
            links = list(self._links.values())
        for link in links:
            link.client.close()

    # --- peer.Handler -----------------------------------------------------------------------

    def request(self, method: str, params: Any) -> object:
        match method:
            case "initialize":
                return self.initialize(p.read(p.Initialize, params, method))
            case "authenticate":
                return {}
            case "session/new":
                return self.new_session(p.read(p.NewSession, params, method))
            case "session/load":
                self.load_session(p.read(p.LoadSession, params, method), replay=True)
                return {}  # a LoadSessionResponse: an object, which typed clients insist on
            case "session/resume":
                self.load_session(p.read(p.LoadSession, params, method), replay=False)
                return {}
            case "session/list":
                return self.list_sessions(p.read(p.ListSessions, params, method))
            case "session/prompt":
                request = p.read(p.Prompt, params, method)
                return self.session(request.session_id).prompt(request)
            case "session/close":
                ref = p.read(p.SessionRef, params, method)
                session = self.session(ref.session_id)
                with self._lock:
                    self._sessions.pop(ref.session_id, None)
                session.close()
                return {}
            case _:
                raise AcpError(METHOD_NOT_FOUND, f"tether does not serve {method}")

    def notify(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            ref = p.read(p.SessionRef, params, method)
            session = self._sessions.get(ref.session_id)
            if session is not None:
                session.cancel()

    def session(self, session_id: str) -> AcpSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise AcpError(
                RESOURCE_NOT_FOUND,
                f"session {session_id} is not open here: session/load or session/resume it",
            )
        return session

    def initialize(self, request: p.Initialize) -> JSON:
        info = request.client_info
        if info is not None and info.name:
            self.client_name = f"acp:{info.name}"
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True, "sse": False},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "tether", "title": "tether", "version": __version__},
        }

    def new_session(self, request: p.NewSession) -> JSON:
        servers = _mcp_servers(request.mcp_servers)
        link = self.link(request.cwd)
        created = self.call(link.client.call, SESSION_CREATE, SessionCreateParams())
        session = self._open(created.session.id, link)
        session.attach(replay=False)
        if servers:
            self._give_mcp(session, servers)
        return {"sessionId": session.id}

    def load_session(self, request: p.LoadSession, *, replay: bool) -> None:
        servers = _mcp_servers(request.mcp_servers)
        link = self.link(request.cwd)
        session = self._open(request.session_id, link)
        try:
            session.attach(replay=replay)
        except AcpError:
            with self._lock:
                if self._sessions.get(session.id) is session and session.cursor is None:
                    del self._sessions[session.id]
            raise
        if servers:  # none leaves alone those another editor of the session gave
            self._give_mcp(session, servers)

    def _give_mcp(self, session: AcpSession, servers: list[SessionMcpServer]) -> None:
        """Run the editor's MCP servers for the session; they stop when it closes here (or
        this process ends: the daemon drops them with the connection)."""
        params = SessionConfigureParams(session_id=session.id, mcp_servers=servers)
        self.call(session.link.client.call, SESSION_CONFIGURE, params)

    def list_sessions(self, request: p.ListSessions) -> JSON:
        if request.cursor is not None:
            raise AcpError(INVALID_PARAMS, "unknown cursor: tether lists every session at once")
        link = self.link(request.cwd or str(self.default_workspace))
        listed = self.call(link.client.call, SESSION_LIST).sessions
        sessions: list[JSON] = []
        for info in listed:
            entry: JSON = {
                "sessionId": info.id,
                "cwd": str(link.workspace),
                "updatedAt": _iso(info.updated_at),
            }
            if info.title:
                entry["title"] = info.title
            sessions.append(entry)
        return {"sessions": sessions}


def _mcp_servers(servers: list[Any]) -> list[SessionMcpServer]:
    given, left_out = session_servers(servers)
    if left_out:
        log(f"leaving out MCP server(s) {', '.join(left_out)}")
    return given


def serve(default_workspace: Path) -> int:
    """Speak ACP on stdin/stdout until stdin ends."""
    peer = Peer()
    agent = Agent(peer, default_workspace)
    peer.serve(agent, on_close=agent.close)
    return 0


__all__ = ["Agent", "SessionSnapshot", "serve"]
