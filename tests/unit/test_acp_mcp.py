"""The MCP servers an editor passes, as the servers tether gives the session
(`tether.clients.acp.mcp`): built with the ACP SDK's own types, as an editor sends them."""

import pytest

from tether.clients.acp.mcp import session_servers
from tether.clients.acp.peer import AcpError
from tether.protocol.methods import SessionMcpServer


def test_names_become_tool_name_safe_and_unique_and_sse_is_left_out() -> None:
    from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer

    sent = [
        McpServerStdio(
            name="GitHub tools", command="gh-mcp", args=["--x"],
            env=[EnvVariable(name="TOKEN", value="t")],
        ),
        McpServerStdio(name="GitHub/tools", command="other", args=[], env=[]),
        HttpMcpServer(
            type="http", name="é" * 40, url="https://mcp.example/", headers=[
                HttpHeader(name="Authorization", value="Bearer k")
            ],
        ),
        SseMcpServer(type="sse", name="old", url="https://old.example/", headers=[]),
    ]  # fmt: skip
    given, left_out = session_servers([s.model_dump(by_alias=True) for s in sent])
    assert given == [
        SessionMcpServer(name="GitHub_tools", command="gh-mcp", args=["--x"], env={"TOKEN": "t"}),
        SessionMcpServer(name="GitHub_tools-2", command="other"),
        SessionMcpServer(
            name="_" * 32, url="https://mcp.example/", headers={"Authorization": "Bearer k"}
        ),
    ]
    assert left_out == ["old (sse: tether speaks stdio and http)"]


def test_a_server_that_is_not_one_is_invalid_params() -> None:
    with pytest.raises(AcpError) as error:
        session_servers([{"command": "x"}])
    assert error.value.code == -32602
    assert "mcpServers[0]" in error.value.message
