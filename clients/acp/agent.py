"""`tether acp`: an Agent Client Protocol (v1) agent on stdio, backed by the workspace daemons.

An ACP session is a tether session, under the same id: `session/new` creates one in the
daemon of the workspace its `cwd` is in (the git root above it, as the CLI finds it, started
when none runs), `session/load` and `session/resume` attach to one, `session/list` lists a
workspace's. Every session this process opened stays attached as a controller, so what any
client does in it (a turn the CLI starts, an approval answered in another editor) reaches
the editor as `session/update`s (see `updates`), and the CLI sees what the editor does.

Threads (`peer` runs each editor request on its own): one connection per workspace
(`SharedClient`), whose pump thread hands each session's events to its `AcpSession` in order.
An `AcpSession` turns them into updates under its lock, which a request holds while it asks
the daemon something whose answer decides how later events read (the user message a prompt
sends, the snapshot a load replays): the pump waits for it, so no event is read half-known.

Approvals: each `approval_requested` becomes a `session/request_permission`; the editor's
choice is sent as `approval/respond`. An approval resolved otherwise (another client, or the
daemon for a cancelled turn) withdraws the editor's request with `$/cancel_request`; the
editor answers it `cancelled`, and that answer is not passed on.
"""

import base64
import posixpath
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tether.clients.acp import params as p
from tether.clients.acp.peer import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    Abandoned,
    AcpError,
    Peer,
    Pending,
)
from tether.clients.acp.updates import JSON, Translator, permission_tool_call
from tether.clients.call_error import CallError
from tether.clients.cli.interactive.channel import SharedClient
from tether.clients.discovery import DaemonUnavailable, find_workspace
from tether.clients.websocket import WebSocketError
from tether.protocol.errors import ErrorCode
from tether.protocol.events import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    TurnCompleted,
)
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    SESSION_ATTACH,
    SESSION_CREATE,
    SESSION_DETACH,
    SESSION_LIST,
    TURN_CANCEL,
    TURN_START,
    ApprovalRespondParams,
    Attachment,
    ImageInput,
    SessionAttachParams,
    SessionCreateParams,
    SessionDeletedParams,
    SessionEventParams,
    SessionRef,
    SessionResyncParams,
    TurnCancelParams,
    TurnStartParams,
)
from tether.protocol.session import Cursor, SessionSnapshot
from tether.protocol.version import __version__

PROTOCOL_VERSION = 1
"""The ACP version spoken."""

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE = "allow-once", "allow-always", "reject-once"

LOST = "lost the connection to the tether daemon"


def _log(message: str) -> None:
    print(f"tether acp: {message}", file=sys.stderr, flush=True)


class Link:
    """The connection to one workspace's daemon, shared by that workspace's sessions."""

    def __init__(
        self,
        workspace: Path,
        client: SharedClient,
        route: Callable[["Link", str, object], None],
    ) -> None:
        self.workspace = workspace
        self.client = client
        self.alive = True
        self._route = route
        self._pump = threading.Thread(target=self._read, name="acp-pump", daemon=True)
        self._pump.start()

    def _read(self) -> None:
        try:
            while True:
                method, params = self.client.next_notification()
                self._route(self, method, params)
        except (WebSocketError, OSError) as exc:
            _log(f"{LOST} for {self.workspace}: {exc}")
        finally:
            self.alive = False
            self._route(self, "", None)

    def call_quietly(self, what: Callable[[], object]) -> None:
        """Run a call whose failure changes nothing for the editor (a cancel that finds
        the turn over, an answer that comes second)."""
        try:
            what()
        except (CallError, WebSocketError, OSError) as exc:
            _log(f"ignored: {exc}")


class TurnWait:
    """A `session/prompt` waiting for its turn to end."""

    def __init__(self) -> None:
        self.turn_id = ""
        self.cancelled = False
        self.ended = threading.Event()
        self.end: TurnCompleted | None = None
        """None once ended: the connection was lost."""


class AcpSession:
    """One tether session as this editor sees it."""

    def __init__(self, agent: "Agent", session_id: str, link: Link) -> None:
        self.agent = agent
        self.id = session_id
        self.link = link
        self.lock = threading.Lock()
        self.translator = Translator(link.workspace)
        self.cursor: Cursor | None = None
        self.prompts: list[TurnWait] = []
        self.permissions: dict[str, Pending] = {}
        """The editor's open permission requests, by approval id."""

    # --- from the daemon (the pump thread) --------------------------------------------------

    def on_event(self, params: SessionEventParams) -> None:
        with self.lock:
            cursor = self.cursor
            if cursor is None or (cursor.epoch == params.epoch and params.seq <= cursor.seq):
                return  # not attached yet, or already in the snapshot
            self.cursor = Cursor(epoch=params.epoch, seq=params.seq)
            event = params.event
            self._send(self.translator.event(event))
            match event:
                case ApprovalRequested(approval=approval):
                    self._ask(approval)
                case ApprovalResolved(approval_id=approval_id, by=by):
                    waiter = self.permissions.pop(approval_id, None)
                    if waiter is not None:
                        self.agent.peer.abandon(waiter, f"answered by {by}")
                case TurnCompleted(turn_id=turn_id):
                    for wait in [w for w in self.prompts if w.turn_id == turn_id]:
                        self.prompts.remove(wait)
                        wait.end = event
                        wait.ended.set()
                case _:
                    pass

    def lost(self) -> None:
        with self.lock:
            prompts, self.prompts = self.prompts, []
            permissions, self.permissions = self.permissions, {}
        for wait in prompts:
            wait.ended.set()
        for waiter in permissions.values():
            self.agent.peer.abandon(waiter, LOST)

    def _send(self, updates: list[JSON]) -> None:
        for update in updates:
            self.agent.peer.notify("session/update", {"sessionId": self.id, "update": update})

    # --- opening ----------------------------------------------------------------------------

    def attach(self, *, replay: bool) -> None:
        """Attach (again) from a snapshot; with `replay`, send the editor the whole session."""
        with self.lock:
            result = self.agent.call(
                self.link.client.call, SESSION_ATTACH, SessionAttachParams(session_id=self.id)
            )
            snapshot = result.snapshot
            assert snapshot is not None  # attaching without a cursor answers with one
            self.translator = Translator(self.link.workspace)
            self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
            if replay:
                self._send(self.translator.snapshot(snapshot))
            else:
                self.translator.resume(snapshot)
            for approval in snapshot.pending_approvals:
                self._ask(approval)

    def resync(self) -> None:
        """Catch up after the daemon dropped this connection's subscription."""
        with self.lock:
            cursor = self.cursor
            result = self.link.client.call(
                SESSION_ATTACH, SessionAttachParams(session_id=self.id, after=cursor)
            )
            self.cursor = Cursor(epoch=result.epoch, seq=result.from_seq)
            if result.snapshot is not None:
                # The missed events are gone: carry on from the state as it is now.
                _log(f"session {self.id}: events were missed; the editor may show gaps")
                self.translator.resume(result.snapshot)

    # --- prompts ----------------------------------------------------------------------------

    def prompt(self, request: p.Prompt) -> JSON:
        turn = turn_params(self.id, request.prompt)
        wait = TurnWait()
        with self.lock:
            self.prompts.append(wait)  # a cancel from now on marks it
            try:
                started = self.agent.call(self.link.client.call, TURN_START, turn)
            except AcpError:
                self.prompts.remove(wait)
                raise
            self.translator.skip_inputs.add(started.input_id)
            wait.turn_id = started.turn_id
        if wait.cancelled:  # cancelled while turn/start was on its way
            self._cancel_turn(started.turn_id)
        wait.ended.wait()
        if wait.cancelled:
            return {"stopReason": "cancelled"}
        end = wait.end
        if end is None:
            raise AcpError(INTERNAL_ERROR, f"{LOST}; load the session again")
        match end.status:
            case "completed":
                return {"stopReason": "end_turn"}
            case "cancelled":
                return {"stopReason": "cancelled"}
            case "paused":
                return {"stopReason": "max_turn_requests"}
            case "interrupted":
                raise AcpError(
                    INTERNAL_ERROR,
                    "the tether daemon stopped while the turn ran; send `continue` to resume",
                )
            case _:
                error = end.error
                message = error.message if error is not None else "the turn failed"
                data = {"code": error.code} if error is not None else None
                raise AcpError(INTERNAL_ERROR, message, data)

    def cancel(self) -> None:
        """`session/cancel`, on the reader thread: mark the prompts, cancel in the daemon on
        a thread of its own."""
        for wait in list(self.prompts):
            wait.cancelled = True
        self.agent.spawn(lambda: self._cancel_turn(None))

    def _cancel_turn(self, turn_id: str | None) -> None:
        params = TurnCancelParams(session_id=self.id, turn_id=turn_id)
        self.link.call_quietly(lambda: self.link.client.call(TURN_CANCEL, params))

    # --- approvals --------------------------------------------------------------------------

    def _ask(self, approval: ApprovalRequest) -> None:
        """Ask the editor (under the lock); the answer is waited for on a thread."""
        if approval.id in self.permissions:
            return
        options: list[JSON] = [{"optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once"}]
        if approval.always_rule:
            options.append(
                {
                    "optionId": ALLOW_ALWAYS,
                    "name": f"Always allow {approval.always_rule}",
                    "kind": "allow_always",
                }
            )
        options.append({"optionId": REJECT_ONCE, "name": "Deny", "kind": "reject_once"})
        item = self.translator.tool_item(approval.item_id)
        waiter = self.agent.peer.send_request(
            "session/request_permission",
            {
                "sessionId": self.id,
                "toolCall": permission_tool_call(approval, item),
                "options": options,
            },
        )
        self.permissions[approval.id] = waiter
        self.agent.spawn(lambda: self._answer(approval, waiter))

    def _answer(self, approval: ApprovalRequest, waiter: Pending) -> None:
        try:
            answer = p.read(p.PermissionAnswer, waiter.wait(), "session/request_permission")
            outcome = answer.outcome
        except Abandoned:
            return
        except AcpError as exc:
            outcome = p.CancelledOutcome()
            _log(f"the editor did not answer approval {approval.id}: {exc.message}")
        with self.lock:
            if self.permissions.get(approval.id) is not waiter:
                return
            del self.permissions[approval.id]
        if isinstance(outcome, p.CancelledOutcome):
            # ACP's answer for a cancelled turn, not a refusal: the turn's cancel denies it,
            # or it waits for another client, as with no client attached.
            return
        match outcome:
            case p.SelectedOutcome(option_id=option) if option == ALLOW_ONCE:
                decision, scope, message = "allow", "once", ""
            case p.SelectedOutcome(option_id=option) if option == ALLOW_ALWAYS:
                decision, scope, message = "allow", "always", ""
            case p.SelectedOutcome(option_id=option) if option == REJECT_ONCE:
                decision, scope, message = "deny", "once", ""
            case _:
                # An option we did not offer: never taken as a yes.
                decision, scope, message = "deny", "once", "unknown answer from the editor"
        respond = ApprovalRespondParams(
            session_id=self.id,
            approval_id=approval.id,
            decision=decision,
            scope=scope,
            message=message,
        )
        self.link.call_quietly(lambda: self.link.client.call(APPROVAL_RESPOND, respond))

    def close(self) -> None:
        """`session/close`: cancel this editor's prompt, if one runs (a turn another client
        started goes on), and detach."""
        if self.prompts:
            self.cancel()
        with self.lock:
            permissions, self.permissions = self.permissions, {}
            self.cursor = None
        for waiter in permissions.values():
            self.agent.peer.abandon(waiter, "the session was closed")
        self.link.call_quietly(
            lambda: self.link.client.call(SESSION_DETACH, SessionRef(session_id=self.id))
        )


def turn_params(session_id: str, blocks: list[p.ContentBlock]) -> TurnStartParams:
    """What a prompt's content blocks become: text, mentions (files the editor links to),
    attachments (resources it embeds) and images (the daemon checks them, and refuses them
    for a model that takes none)."""
    texts: list[str] = []
    mentions: list[str] = []
    attachments: list[Attachment] = []
    images: list[ImageInput] = []
    for block in blocks:
        match block:
            case p.Text(text=text):
                texts.append(text)
            case p.ResourceLink(uri=uri, name=name):
                path = _file_path(uri)
                if path is not None:  # the daemon says when it is outside the workspace
                    mentions.append(path)
                else:
                    texts.append(f"[{name or uri}]({uri})")
            case p.EmbeddedResource(resource=resource):
                if resource.text is None:
                    raise AcpError(
                        INVALID_PARAMS, f"{resource.uri}: binary resources are not supported"
                    )
                name = _file_path(resource.uri) or resource.uri
                attachments.append(Attachment(name=name, text=resource.text))
            case p.Image(data=data, mime_type=mime_type, uri=uri):
                try:
                    raw = base64.b64decode(data, validate=True)
                except ValueError:
                    raise AcpError(INVALID_PARAMS, "an image block's data is not base64") from None
                where = (_file_path(uri) or uri) if uri else ""
                name = posixpath.basename(where) or f"image {len(images) + 1}"
                images.append(ImageInput(name=name, data=raw, mime_type=mime_type))
            case p.Audio():
                raise AcpError(
                    INVALID_PARAMS, "tether takes text, links, text resources and images only"
                )
    text = "\n\n".join(texts)
    if not text.strip() and images:
        # An editor may send a picture alone; a turn needs words, so these stand in for them.
        text = IMAGES_ONLY_TEXT
    return TurnStartParams(
        session_id=session_id,
        text=text,
        mentions=mentions,
        attachments=attachments,
        images=images,
    )


IMAGES_ONLY_TEXT = "(the attached image)"
"""The text of a prompt that is only images."""


def _file_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path)


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
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "tether", "title": "tether", "version": __version__},
        }

    def new_session(self, request: p.NewSession) -> JSON:
        _ignore_mcp(request.mcp_servers)
        link = self.link(request.cwd)
        created = self.call(link.client.call, SESSION_CREATE, SessionCreateParams())
        session = self._open(created.session.id, link)
        session.attach(replay=False)
        return {"sessionId": session.id}

    def load_session(self, request: p.LoadSession, *, replay: bool) -> None:
        _ignore_mcp(request.mcp_servers)
        link = self.link(request.cwd)
        session = self._open(request.session_id, link)
        try:
            session.attach(replay=replay)
        except AcpError:
            with self._lock:
                if self._sessions.get(session.id) is session and session.cursor is None:
                    del self._sessions[session.id]
            raise

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


def _ignore_mcp(servers: list[Any]) -> None:
    if servers:
        _log(f"ignoring {len(servers)} MCP server(s): tether does not connect to MCP servers yet")


def serve(default_workspace: Path) -> int:
    """Speak ACP on stdin/stdout until stdin ends."""
    peer = Peer()
    agent = Agent(peer, default_workspace)
    peer.serve(agent, on_close=agent.close)
    return 0


__all__ = ["Agent", "SessionSnapshot", "serve"]
