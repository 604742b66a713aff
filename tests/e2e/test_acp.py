"""`tether acp` driven by the official ACP client (the Python SDK's `ClientSideConnection`, over
the subprocess's stdio), against the real daemon and the scripted model.

The SDK validates every message it receives against ACP's schema; `Editor` counts the
`session/update`s it read both raw and parsed, so an update the schema refuses fails the test
instead of vanishing into the SDK's log."""

import asyncio
import base64
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from tests.support import (
    DaemonProcess,
    Home,
    attach,
    collect_until_turn_end,
    command_step,
    completed_items,
    create_session,
    run_cli,
    start_turn,
    tagged,
    wait_until,
)
from tether.protocol.events import ApprovalResolved
from tether.protocol.items import AgentMessage, ToolCall, UserMessage
from tether.testing import ModelServer

if TYPE_CHECKING:
    from acp import Client as AcpClient
    from acp.client.connection import ClientSideConnection
    from acp.connection import StreamEvent
    from acp.schema import PermissionOption, RequestPermissionResponse

# The SDK is imported where it is used: its schema costs a second of CPU to import, which every
# pytest worker would pay while collecting (`tests/unit/test_acp_updates.py` does the same).

pytestmark = [pytest.mark.e2e, pytest.mark.shared_daemon]

JSON = dict[str, Any]
TIMEOUT = 30.0

Decide = Callable[[JSON], Awaitable[str | None]]
"""How the editor answers a permission request (its raw params): an option id, or None for
`cancelled`."""


class Editor:
    """The client side: keeps what the agent sends; answers permissions with `decide`."""

    def __init__(self) -> None:
        self.received: list[JSON] = []
        self.parsed_updates = 0
        self.decide: Decide = self._refuse
        self.withdrawn: dict[int, asyncio.Event] = {}
        self._request_ids: list[int] = []
        self.permission_asked = asyncio.Event()

    async def _refuse(self, request: JSON) -> str | None:
        raise AssertionError(f"unexpected permission request {request}")

    def observe(self, event: "StreamEvent") -> None:
        from acp.connection import StreamDirection

        if event.direction != StreamDirection.INCOMING:
            return
        message = event.message
        self.received.append(message)
        if message.get("method") == "session/request_permission":
            self._request_ids.append(message["id"])
            self.withdrawn.setdefault(message["id"], asyncio.Event())
        if message.get("method") == "$/cancel_request":
            self.withdrawn.setdefault(message["params"]["requestId"], asyncio.Event()).set()

    def updates(self, session_id: str) -> list[JSON]:
        return [
            m["params"]["update"]
            for m in self.received
            if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
        ]

    def permission_requests(self) -> list[JSON]:
        return [m for m in self.received if m.get("method") == "session/request_permission"]

    def check_schema(self) -> None:
        raw = sum(m.get("method") == "session/update" for m in self.received)
        assert raw == self.parsed_updates, "an update the ACP schema refuses"

    # --- acp.Client -------------------------------------------------------------------------

    async def request_permission(
        self, session_id: str, tool_call: Any, options: "list[PermissionOption]", **kwargs: Any
    ) -> "RequestPermissionResponse":
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        request_id = self._request_ids.pop(0)
        request = next(
            m
            for m in self.permission_requests()
            if m["id"] == request_id  # a response to the editor's own request may share it
        )
        self.permission_asked.set()
        option = await self.decide(request)
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        assert option in [o.option_id for o in options]
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.parsed_updates += 1


def as_client(editor: Editor) -> "AcpClient":
    """The editor as the SDK types a client: it serves neither files nor terminals, and
    does not say it does (the SDK answers those methods "not found")."""
    return cast("AcpClient", editor)


@asynccontextmanager
async def editor_agent(
    home: Home, workspace: Path, editor: Editor
) -> "AsyncGenerator[ClientSideConnection]":
    """`tether acp` as a subprocess of `home`, started in `workspace`, initialized."""
    from acp import PROTOCOL_VERSION
    from acp.schema import Implementation
    from acp.stdio import spawn_agent_process

    log = open(home.root / "acp-stderr.log", "ab")  # noqa: SIM115, ASYNC230
    try:
        async with spawn_agent_process(
            as_client(editor),
            sys.executable,
            "-P",
            "-m",
            "tether.clients.cli.main",
            "acp",
            env=home.env,
            cwd=workspace,
            transport_kwargs={"stderr": log},
            observers=[editor.observe],
        ) as (connection, process):
            await connection.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_info=Implementation(name="test-editor", version="1"),
            )
            yield connection
        # Leaving closed its stdin and waited for it: it ended on its own, not killed.
        assert process.returncode == 0
    finally:
        log.close()
    editor.check_schema()


def run(test: Callable[[], Awaitable[None]]) -> None:
    """The SDK is asyncio's: each test runs its own loop, within TIMEOUT."""

    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await test()

    asyncio.run(bounded())


def fold(updates: list[JSON]) -> JSON:
    """What a stream of updates leaves on the editor's screen: each message's whole text,
    each tool call with every update applied, the last plan."""
    messages: dict[tuple[str, str], str] = {}
    tools: dict[str, JSON] = {}
    plan: list[JSON] = []
    for update in updates:
        kind = update["sessionUpdate"]
        if kind.endswith("_chunk"):
            key = (kind, update["messageId"])
            messages[key] = messages.get(key, "") + update["content"]["text"]
        elif kind == "tool_call":
            tools[update["toolCallId"]] = {k: v for k, v in update.items() if k != "sessionUpdate"}
        elif kind == "tool_call_update":
            fields = {k: v for k, v in update.items() if k != "sessionUpdate" and v is not None}
            tools[update["toolCallId"]].update(fields)
        elif kind == "plan":
            plan = update["entries"]
    return {"messages": messages, "tools": tools, "plan": plan}


# --- tests ------------------------------------------------------------------------------------


def test_initialize_advertises_what_tether_serves(daemon: DaemonProcess) -> None:
    from acp import PROTOCOL_VERSION
    from acp.stdio import spawn_agent_process

    editor = Editor()

    async def test() -> None:
        async with spawn_agent_process(
            as_client(editor),
            sys.executable,
            "-P",
            "-m",
            "tether.clients.cli.main",
            "acp",
            env=daemon.home.env,
            cwd=daemon.workspace,
        ) as (connection, _):
            answer = await connection.initialize(protocol_version=PROTOCOL_VERSION)
            assert answer.protocol_version == 1
            capabilities = answer.agent_capabilities
            assert capabilities is not None
            assert capabilities.load_session is True
            prompts = capabilities.prompt_capabilities
            assert prompts is not None
            assert (prompts.image, prompts.audio, prompts.embedded_context) == (True, False, True)
            mcp = capabilities.mcp_capabilities
            assert mcp is not None
            assert (mcp.http, mcp.sse) == (True, False)
            sessions = capabilities.session_capabilities
            assert sessions is not None
            assert sessions.list is not None
            assert sessions.resume is not None
            assert answer.agent_info is not None
            assert answer.agent_info.name == "tether"
            await connection.close()

    run(test)


def test_a_prompt_streams_its_turn_and_a_load_replays_it(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    """Reasoning, text, a read, a plan and an edit, streamed as ACP updates; the same turn
    followed by the CLI's client; replayed by `session/load` in a second editor, equal once
    folded; listed by `tether sessions` and `session/list`."""
    from acp import text_block
    from acp.schema import ResourceContentBlock

    model_server.set_script(
        {
            "steps": [
                {
                    "reasoning": "The README first.",
                    "text": "Looking.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "README.md"}},
                        {"name": "read_file", "arguments": {"path": "src/app.py"}},
                    ],
                },
                {
                    "tool_calls": [
                        {
                            "name": "todo_write",
                            "arguments": {
                                "todos": [
                                    {"content": "read", "status": "completed"},
                                    {"content": "greet with hi", "status": "completed"},
                                ]
                            },
                        }
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "edit_file",
                            "arguments": {
                                "path": "src/app.py",
                                "old_string": "hello",
                                "new_string": "hi",
                            },
                        }
                    ]
                },
                {"text": "Done: it greets with hi now.", "chunks": 4},
            ]
        }
    )
    workspace = daemon.workspace
    (workspace / ".git").mkdir(exist_ok=True)  # the session's cwd is below the git root
    editor = Editor()
    later = Editor()

    async def test() -> None:
        async with editor_agent(daemon.home, workspace, editor) as connection:
            session = await connection.new_session(cwd=str(workspace / "src"))
            session_id = session.session_id
            with daemon.client("cli") as cli:
                attach(cli, session_id)
                prompt = connection.prompt(
                    session_id=session_id,
                    prompt=[
                        text_block("What does it do?"),
                        ResourceContentBlock(
                            type="resource_link",
                            uri=f"file://{workspace}/README.md",
                            name="README.md",
                        ),
                    ],
                )
                answer, events = await asyncio.gather(
                    prompt, asyncio.to_thread(collect_until_turn_end, cli, session_id)
                )
            assert answer.stop_reason == "end_turn"

        live = editor.updates(session_id)
        shown = fold(live)
        texts: dict[str, str] = {}
        for (kind, _), text in shown["messages"].items():
            texts[kind] = texts.get(kind, "") + text
        assert texts == {
            "agent_thought_chunk": "The README first.",
            "agent_message_chunk": "Looking.Done: it greets with hi now.",
        }
        # Several chunks of the last answer, as it streamed.
        assert sum(u["sessionUpdate"] == "agent_message_chunk" for u in live) >= 4
        read, _, todo, edit = shown["tools"].values()
        assert (read["kind"], read["title"]) == ("read", "Read README.md")
        assert read["status"] == "completed"
        assert read["locations"] == [{"path": str(workspace / "README.md")}]
        assert "Demo project" in read["content"][0]["content"]["text"]
        assert todo["kind"] == "think"
        assert shown["plan"] == [
            {"content": "read", "status": "completed", "priority": "medium"},
            {"content": "greet with hi", "status": "completed", "priority": "medium"},
        ]
        assert (edit["kind"], edit["status"]) == ("edit", "completed")
        assert edit["content"] == [
            {
                "type": "diff",
                "path": str(workspace / "src" / "app.py"),
                "oldText": "def greet(name):\n    return f'hello {name}'\n",
                "newText": "def greet(name):\n    return f'hi {name}'\n",
            }
        ]
        # The CLI's client saw the same turn: its messages and tool calls.
        items = completed_items(events)
        answers = [i.text for i in items if isinstance(i, AgentMessage)]
        assert "".join(answers) == texts["agent_message_chunk"]
        assert sorted(i.id for i in items if isinstance(i, ToolCall)) == sorted(shown["tools"])
        usage = [u for u in live if u["sessionUpdate"] == "usage_update"][-1]
        assert usage["size"] > usage["used"] > 0
        # The editor's own prompt is not echoed back to it.
        assert not any(u["sessionUpdate"] == "user_message_chunk" for u in live)

        listed = run_cli(daemon.home, "sessions", cwd=workspace)
        assert session_id in listed.stdout

        async with editor_agent(daemon.home, workspace, later) as connection:
            found = await connection.list_sessions(cwd=str(workspace))
            assert session_id in [s.session_id for s in found.sessions]
            await connection.load_session(cwd=str(workspace), session_id=session_id)
            replay = later.updates(session_id)
            replayed = fold(replay)
        assert replay[-1] == {**usage, "used": replay[-1]["used"]}
        (user,) = [i for i in items if isinstance(i, UserMessage)]
        assert replayed["messages"].pop(("user_message_chunk", user.id)) == user.text
        assert user.text == "What does it do?"
        assert "# Demo project" in user.context  # the linked file went as a mention
        assert replayed["messages"] == shown["messages"]
        assert replayed["tools"] == shown["tools"]
        assert replayed["plan"] == shown["plan"]

    run(test)


def test_permissions_answered_in_the_editor_resolve_for_the_cli(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    from acp import text_block

    model_server.set_script(
        {"steps": [command_step("echo granted"), command_step("echo refused"), {"text": "ok"}]}
    )
    editor = Editor()
    choices = iter(["allow-once", "reject-once"])

    async def decide(request: JSON) -> str | None:
        return next(choices)

    editor.decide = decide

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session_id = (await connection.new_session(cwd=str(daemon.workspace))).session_id
            with daemon.client("cli") as cli:
                attach(cli, session_id)
                prompt = connection.prompt(session_id=session_id, prompt=[text_block("echo")])
                answer, events = await asyncio.gather(
                    prompt, asyncio.to_thread(collect_until_turn_end, cli, session_id)
                )
        assert answer.stop_reason == "end_turn"
        resolved = [e.event for e in events if isinstance(e.event, ApprovalResolved)]
        assert [(r.decision, r.by) for r in resolved] == [
            ("allow", "acp:test-editor"),
            ("deny", "acp:test-editor"),
        ]
        asked = [r["params"] for r in editor.permission_requests()]
        assert [a["toolCall"]["title"] for a in asked] == [
            "Run `echo granted`",
            "Run `echo refused`",
        ]
        assert {o["optionId"] for o in asked[0]["options"]} >= {"allow-once", "reject-once"}
        granted, refused = fold(editor.updates(session_id))["tools"].values()
        assert (granted["kind"], granted["status"]) == ("execute", "completed")
        assert "granted" in granted["content"][0]["content"]["text"]
        assert refused["status"] == "failed"

    run(test)


def test_an_edit_waiting_for_approval_shows_as_a_diff(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    """The editor is asked with the pending edit as ACP `diff` content: the file as it is and
    as it would be, so it can show its own diff view before the user decides."""
    from acp import text_block

    from tether.protocol.methods import SESSION_CONFIGURE, SessionConfigureParams

    target = daemon.workspace / "pending.txt"
    target.write_text("one\ntwo\nthree\n")
    edit = {"path": "pending.txt", "old_string": "two", "new_string": "2"}
    model_server.set_script(
        {
            "steps": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "pending.txt"}}]},
                {"tool_calls": [{"name": "edit_file", "arguments": edit}]},
                {"text": "ok"},
            ]
        }
    )
    editor = Editor()
    seen: list[JSON] = []

    async def decide(request: JSON) -> str | None:
        seen.append(request["params"]["toolCall"])
        assert target.read_text() == "one\ntwo\nthree\n"  # not written before the answer
        return "allow-once"

    editor.decide = decide

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session_id = (await connection.new_session(cwd=str(daemon.workspace))).session_id
            with daemon.client("cli") as cli:
                configure = SessionConfigureParams(session_id=session_id, permission_mode="ask")
                cli.call(SESSION_CONFIGURE, configure)
            answer = await connection.prompt(session_id=session_id, prompt=[text_block("edit")])
            assert answer.stop_reason == "end_turn"

    run(test)
    (call,) = seen
    assert call["kind"] == "edit"
    assert call["content"][0] == {
        "type": "diff",
        "path": str(target),
        "oldText": "one\ntwo\nthree\n",
        "newText": "one\n2\nthree\n",
    }
    assert target.read_text() == "one\n2\nthree\n"


SDK_SERVER = Path(__file__).resolve().parents[1] / "mcp" / "sdk_server.py"


def test_mcp_servers_the_editor_passes_serve_the_session_until_it_closes(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    """A stdio server (the MCP Python SDK's) passed in `session/new` runs for the session:
    the model calls its tool and gets the answer. `session/close` stops it; passed again in
    `session/load` by a second editor, it runs again, and stops when that editor goes."""
    from acp import text_block
    from acp.schema import EnvVariable, McpServerStdio

    marker = f"acp-mcp-{tmp_path.name}"
    server = McpServerStdio(
        name="Editor tools",  # an ACP name is for people: tether makes it Editor_tools
        command=sys.executable,
        args=[str(SDK_SERVER), "stdio"],
        env=[EnvVariable(name="MARK", value=marker)],
    )
    echo = {"name": "mcp__Editor_tools__echo", "arguments": {"text": "from the editor"}}
    model_server.set_script(
        {"steps": [{"tool_calls": [echo]}, {"text": "It said so."}, {"text": "Again."}]}
    )
    editor = Editor()
    later = Editor()

    async def allow(request: JSON) -> str | None:
        return "allow-once"

    editor.decide = allow
    running: list[int] = []

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session = await connection.new_session(cwd=str(daemon.workspace), mcp_servers=[server])
            session_id = session.session_id
            answer = await connection.prompt(session_id=session_id, prompt=[text_block("echo")])
            assert answer.stop_reason == "end_turn"
            running.extend(tagged(marker))
            await connection.close_session(session_id=session_id)
            await asyncio.to_thread(
                wait_until, lambda: not tagged(marker), "the server stopped with the session"
            )
        (call,) = fold(editor.updates(session_id))["tools"].values()
        assert call["status"] == "completed"
        assert call["content"][0]["content"]["text"] == "echo: from the editor"
        assert call["rawInput"] == {"text": "from the editor"}

        async with editor_agent(daemon.home, daemon.workspace, later) as connection:
            await connection.load_session(
                cwd=str(daemon.workspace), session_id=session_id, mcp_servers=[server]
            )
            answer = await connection.prompt(session_id=session_id, prompt=[text_block("more")])
            assert answer.stop_reason == "end_turn"
            assert tagged(marker)
        # The editor went (its connection closed) without closing the session.
        await asyncio.to_thread(
            wait_until, lambda: not tagged(marker), "the server stopped with the editor"
        )
        tools = [t["function"]["name"] for t in model_server.requests[-1]["tools"]]
        assert "mcp__Editor_tools__echo" in tools

    run(test)
    assert len(running) == 1
    first = model_server.requests[1]["messages"][-1]
    assert first["role"] == "tool"
    assert "echo: from the editor" in str(first["content"])


def test_an_http_mcp_server_the_editor_passes_serves_the_session(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    """`mcpCapabilities.http`: a streamable-HTTP server (the MCP Python SDK's, on loopback)
    passed in `session/new` answers the model's call; an `sse` one is left out, not refused."""
    import subprocess

    from acp import text_block
    from acp.schema import AcpMcpServer, HttpMcpServer, McpServerStdio, SseMcpServer

    served = subprocess.Popen(
        [sys.executable, str(SDK_SERVER), "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert served.stdout is not None
        port = int(served.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}/mcp"
        servers: list[HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio] = [
            HttpMcpServer(type="http", name="web", url=url, headers=[]),
            SseMcpServer(type="sse", name="old", url=url, headers=[]),
        ]
        add = {"name": "mcp__web__add", "arguments": {"a": 2, "b": 40}}
        model_server.set_script({"steps": [{"tool_calls": [add]}, {"text": "42."}]})
        editor = Editor()

        async def allow(request: JSON) -> str | None:
            return "allow-once"

        editor.decide = allow

        async def test() -> None:
            async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
                session_id = (
                    await connection.new_session(cwd=str(daemon.workspace), mcp_servers=servers)
                ).session_id
                answer = await connection.prompt(session_id=session_id, prompt=[text_block("add")])
                assert answer.stop_reason == "end_turn"
            (call,) = fold(editor.updates(session_id))["tools"].values()
            assert call["status"] == "completed"
            assert "42" in call["content"][0]["content"]["text"]

        run(test)
    finally:
        served.kill()
        served.wait()
        if served.stdout is not None:
            served.stdout.close()
    tools = [t["function"]["name"] for t in model_server.requests[0]["tools"]]
    assert "mcp__web__add" in tools
    assert not [t for t in tools if t.startswith("mcp__old__")]
    stderr = (daemon.home.root / "acp-stderr.log").read_text()
    assert "leaving out MCP server(s) old (sse: tether speaks stdio and http)" in stderr


def test_images_an_mcp_tool_returns_reach_the_editor_as_images(
    daemon: DaemonProcess, model_server: ModelServer, tmp_path: Path
) -> None:
    """A tool's image goes to the editor as ACP image content (the bytes the model got), live
    and in a `session/load` replay, beside the text line naming it."""
    import io

    from acp import text_block
    from acp.schema import McpServerStdio
    from PIL import Image

    from tests.unit.test_mcp_pool import TINY
    from tether.protocol.methods import SESSION_CONFIGURE, SessionConfigureParams

    picture = tmp_path / "chart.png"
    Image.new("RGB", (4, 3), (200, 30, 30)).save(picture)
    server = McpServerStdio(name="tiny", command=sys.executable, args=[str(TINY)], env=[])
    look = {"name": "mcp__tiny__look", "arguments": {"path": str(picture)}}
    model_server.set_script({"steps": [{"tool_calls": [look]}, {"text": "A red chart."}]})
    editor = Editor()
    later = Editor()

    async def allow(request: JSON) -> str | None:
        return "allow-once"

    editor.decide = allow

    def images(updates: list[JSON]) -> list[JSON]:
        (call,) = fold(updates)["tools"].values()
        assert call["status"] == "completed"
        assert "here" in call["content"][0]["content"]["text"]
        return [c["content"] for c in call["content"] if c["content"]["type"] == "image"]

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session_id = (
                await connection.new_session(cwd=str(daemon.workspace), mcp_servers=[server])
            ).session_id
            with daemon.client("cli") as cli:  # a model that takes images
                configure = SessionConfigureParams(session_id=session_id, model="gpt-4o")
                cli.call(SESSION_CONFIGURE, configure)
            answer = await connection.prompt(session_id=session_id, prompt=[text_block("look")])
            assert answer.stop_reason == "end_turn"
        async with editor_agent(daemon.home, daemon.workspace, later) as connection:
            await connection.load_session(cwd=str(daemon.workspace), session_id=session_id)
        live, replayed = images(editor.updates(session_id)), images(later.updates(session_id))
        assert live == replayed
        (image,) = live
        assert image["mimeType"] == "image/png"
        shown = Image.open(io.BytesIO(base64.b64decode(image["data"])))
        assert (shown.size, shown.convert("RGB").getpixel((0, 0))) == ((4, 3), (200, 30, 30))

    run(test)


def test_cancel_mid_turn_answers_cancelled(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    """Cancelled while the editor is asked to approve a command: the editor answers the
    question `cancelled` (as ACP asks of it), the prompt `cancelled`, and the command never
    runs."""
    from acp import text_block

    marker = daemon.workspace / "cancel-marker"
    model_server.set_script({"steps": [command_step(f"touch {marker}"), {"text": "unused"}]})
    editor = Editor()
    cancel_sent = asyncio.Event()

    async def decide(request: JSON) -> str | None:
        await cancel_sent.wait()
        return None

    editor.decide = decide

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session_id = (await connection.new_session(cwd=str(daemon.workspace))).session_id
            prompt = asyncio.create_task(
                connection.prompt(session_id=session_id, prompt=[text_block("touch it")])
            )
            await editor.permission_asked.wait()
            await connection.cancel(session_id=session_id)
            cancel_sent.set()
            answer = await prompt
            assert answer.stop_reason == "cancelled"
            with daemon.client("cli") as cli:
                snapshot = attach(cli, session_id).snapshot
            assert snapshot is not None
            assert snapshot.session.state == "cancelled"
        (call,) = fold(editor.updates(session_id))["tools"].values()
        assert call["status"] == "failed"
        assert not marker.exists()

    run(test)


def test_a_permission_answered_from_the_cli_is_withdrawn_from_the_editor(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    from acp import text_block

    model_server.set_script({"steps": [command_step("echo from the cli"), {"text": "done"}]})
    editor = Editor()

    async def decide(request: JSON) -> str | None:
        await editor.withdrawn[request["id"]].wait()
        return None  # what ACP asks of an editor whose request was withdrawn

    editor.decide = decide

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            session_id = (await connection.new_session(cwd=str(daemon.workspace))).session_id
            prompt = asyncio.create_task(
                connection.prompt(session_id=session_id, prompt=[text_block("echo")])
            )
            await editor.permission_asked.wait()
            approved = await asyncio.to_thread(
                run_cli, daemon.home, "approve", session_id, cwd=daemon.workspace
            )
            assert approved.returncode == 0, approved.stderr
            answer = await prompt
        assert answer.stop_reason == "end_turn"
        (request,) = editor.permission_requests()
        assert editor.withdrawn[request["id"]].is_set()
        (call,) = fold(editor.updates(session_id))["tools"].values()
        assert call["status"] == "completed"
        assert "from the cli" in call["content"][0]["content"]["text"]

    run(test)


def test_a_session_started_from_the_cli_loads_and_resumes_in_the_editor(
    daemon: DaemonProcess, model_server: ModelServer
) -> None:
    from acp import text_block

    model_server.set_script({"steps": [{"text": "ok"}, {"text": "ok"}]})
    with daemon.client("cli") as cli:
        session_id = create_session(cli)
        attach(cli, session_id)
        start_turn(cli, session_id, "hello from the terminal")
        collect_until_turn_end(cli, session_id)
    loading, resuming = Editor(), Editor()

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, loading) as connection:
            await connection.load_session(cwd=str(daemon.workspace), session_id=session_id)
        # The SDK takes a null answer too; a client decoding into LoadSessionResponse does not.
        loaded = [m for m in loading.received if "result" in m][-1]
        assert loaded["result"] == {}
        shown = fold(loading.updates(session_id))["messages"]
        assert list(shown.values()) == ["hello from the terminal", "ok"]
        assert [kind for kind, _ in shown] == ["user_message_chunk", "agent_message_chunk"]

        async with editor_agent(daemon.home, daemon.workspace, resuming) as connection:
            await connection.resume_session(cwd=str(daemon.workspace), session_id=session_id)
            assert resuming.updates(session_id) == []  # resuming replays nothing
            answer = await connection.prompt(session_id=session_id, prompt=[text_block("again")])
            assert answer.stop_reason == "end_turn"
            assert fold(resuming.updates(session_id))["messages"].popitem()[1] == "ok"

    run(test)


def test_unknown_sessions_and_methods_get_acp_errors(daemon: DaemonProcess) -> None:
    from acp import RequestError, text_block

    editor = Editor()

    async def test() -> None:
        async with editor_agent(daemon.home, daemon.workspace, editor) as connection:
            with pytest.raises(RequestError) as missing:
                await connection.load_session(cwd=str(daemon.workspace), session_id="s_nope")
            assert missing.value.code == -32002
            with pytest.raises(RequestError) as unopened:
                await connection.prompt(session_id="s_nope", prompt=[text_block("hi")])
            assert unopened.value.code == -32002
            with pytest.raises(RequestError) as relative:
                await connection.new_session(cwd="project")
            assert relative.value.code == -32602
            with pytest.raises(RequestError) as unknown:
                await connection.set_session_mode(session_id="s_nope", mode_id="x")
            assert unknown.value.code == -32601

    run(test)
