"""The pieces of MCP support that need no server: the schema check, results as text, the
definitions (user config, workspace file, who wins), the approvals file, the permission
rules for MCP tools, tool names, and that the daemon imports neither the MCP SDK nor anyio."""

import ast
import json
from pathlib import Path

import pytest

from tether.daemon.config.settings import ConfigError, read_config_file
from tether.daemon.mcp.approvals import ServerApprovals
from tether.daemon.mcp.client import McpTool, ToolAnnotations
from tether.daemon.mcp.config import (
    McpServerConfig,
    ServerDefinition,
    merge,
    read_workspace_servers,
)
from tether.daemon.mcp.content import result_text
from tether.daemon.mcp.http import shown_url
from tether.daemon.mcp.schema import problems
from tether.daemon.tools.base import ToolParams
from tether.daemon.tools.mcp import mcp_tools, tool_name
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.turn.permissions import CallFacts, PermissionPolicy

SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "mode": {"enum": ["fast", "exact"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "where": {"$ref": "#/$defs/place"},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["query"],
    "additionalProperties": False,
    "$defs": {"place": {"type": "object", "required": ["city"]}},
}


def test_the_schema_check_names_every_problem_and_passes_good_arguments() -> None:
    good = {"query": "abc", "limit": 3, "mode": "fast", "tags": ["a"], "where": {"city": "x"}}
    assert problems(SCHEMA, good) == []
    assert problems(SCHEMA, {"query": "abc", "limit": 2.0, "either": None}) == []
    found = problems(SCHEMA, {"limit": 0, "mode": "slow", "tags": ["a", 1, "c"]})
    assert found == [
        "$: missing required property 'query'",
        "$.limit: must be at least 1, got 0",
        "$.mode: must be one of 'fast', 'exact'",
        "$.tags[1]: expected string, got number",
        "$.tags: takes at most 2 items, has 3",
    ]
    assert problems(SCHEMA, {"query": "ABC", "where": {}, "either": 3, "x": 1}) == [
        "$.query: does not match the pattern '^[a-z]+$'",
        "$.where: missing required property 'city'",
        "$.either: matches none of the allowed shapes (anyOf)",
        "$: unknown property 'x' (allowed: query, limit, mode, tags, where, either)",
    ]
    assert problems(SCHEMA, {"query": "a", "limit": True}) == [
        "$.limit: expected integer, got boolean"
    ]


def test_a_schema_it_cannot_read_checks_nothing() -> None:
    assert problems({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}, {"a": 1}) == []
    assert problems({"properties": {"a": {"pattern": "("}}}, {"a": "x"}) == []
    assert problems("not a schema", {"a": 1}) == []


def test_results_become_text_for_the_model() -> None:
    result: dict[str, object] = {
        "content": [
            {"type": "text", "text": "first"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/jpeg"},
            {"type": "audio", "data": "", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a", "name": "a", "mimeType": "text/x"},
            {"type": "resource", "resource": {"uri": "mem://n", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "mem://b", "blob": "AAAA"}},
            {"type": "hologram"},
        ]
    }
    text, is_error = result_text(result)
    assert not is_error
    assert text.splitlines() == [
        "first",
        "[image (image/jpeg, 5 bytes) returned by the tool: not shown, tether sends no images "
        "here]",
        "[audio (audio/wav, 0 bytes) returned by the tool: not shown, tether passes no audio "
        "to the model]",
        "[resource link] file:///a · name: a · mimeType: text/x",
        "[resource mem://n]",
        "inside",
        "[resource mem://b (binary, 3 bytes): not shown]",
        "[a 'hologram' block tether cannot show]",
    ]
    assert result_text({"content": [], "structuredContent": {"n": 1}}) == ('{"n":1}', False)
    assert result_text({"content": [], "isError": True}) == (
        "(the tool returned no content)",
        True,
    )


def test_the_user_config_names_the_server_that_is_wrong(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mcpServers.gh]\ncommand = "gh-mcp"\nurl = "http://x"\n')
    with pytest.raises(ConfigError, match=r"\[mcpServers.gh\]: an MCP server needs exactly one"):
        read_config_file(config)
    config.write_text('[mcpServers.web]\nurl = "ftp://x"\n')
    with pytest.raises(ConfigError, match=r"\[mcpServers.web\]: an MCP server's url must be"):
        read_config_file(config)
    config.write_text('[mcpServers.gh]\ncommand = "gh-mcp"\nargs = ["serve"]\ntimeout = 5\n')
    server = read_config_file(config).mcp_servers["gh"]
    assert (server.command, server.args, server.timeout, server.transport) == (
        "gh-mcp",
        ["serve"],
        5.0,
        "stdio",
    )


def test_the_workspace_file_and_who_wins(tmp_path: Path) -> None:
    assert read_workspace_servers(tmp_path).servers == {}
    (tmp_path / ".tether").mkdir()
    (tmp_path / ".tether/mcp.json").write_text(
        json.dumps({"mcpServers": {"b": {"url": "http://b"}}})
    )
    assert list(read_workspace_servers(tmp_path).servers) == ["b"]
    servers = {"a": {"command": "evil"}, "c": {"command": "tool"}, "d": {"url": "http://d"}}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    found = read_workspace_servers(tmp_path)
    assert found.path == ".mcp.json"  # the first file found is the one read
    user = {
        "a": McpServerConfig(command="mine"),
        "off": McpServerConfig(command="x", enabled=False),
    }
    definitions, problems_found = merge(user, found)
    assert [(d.name, d.source, d.config.command or d.config.url) for d in definitions] == [
        ("a", "user", "mine"),
        ("c", "workspace", "tool"),
        ("d", "workspace", "http://d"),
    ]
    assert problems_found == [
        ".mcp.json defines MCP server(s) a that your own config defines; yours are used"
    ]
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"bad name": {"command": "x"}}}')
    assert "invalid MCP server name(s) 'bad name'" in read_workspace_servers(tmp_path).problem
    (tmp_path / ".mcp.json").write_text("{not json")
    broken = read_workspace_servers(tmp_path)
    assert broken.servers == {}
    assert broken.problem.startswith(".mcp.json: ")


def test_an_approval_is_for_one_definition_and_survives_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mcp-approvals.json"
    first = McpServerConfig(command="tool", args=["a"])
    changed = McpServerConfig(command="tool", args=["a", "--all"])
    approvals = ServerApprovals(path)
    assert not approvals.approved("repo", first.fingerprint())
    approvals.grant("repo", first.fingerprint(), by="cli")
    again = ServerApprovals(path)
    assert again.approved("repo", first.fingerprint())
    assert not again.approved("repo", changed.fingerprint())
    assert not again.approved("other", first.fingerprint())
    assert path.stat().st_mode & 0o077 == 0
    path.write_text("garbage")
    assert not ServerApprovals(path).approved("repo", first.fingerprint())


def facts(tool: str) -> CallFacts:
    return CallFacts(tool=tool, kind="other", external="MCP server gh")


def test_mcp_calls_ask_unless_a_rule_or_the_mode_allows_them() -> None:
    assert PermissionPolicy().decide(facts("mcp__gh__search")).action == "ask"
    assert PermissionPolicy(mode="auto").decide(facts("mcp__gh__search")).action == "allow"
    server = PermissionPolicy(allow=["mcp__gh__*"])
    assert server.decide(facts("mcp__gh__search")).action == "allow"
    assert server.decide(facts("mcp__ghx__search")).action == "ask"
    one = PermissionPolicy(allow=["mcp__gh__search"], deny=["mcp__gh__delete*"])
    assert one.decide(facts("mcp__gh__search")).action == "allow"
    assert one.decide(facts("mcp__gh__list")).action == "ask"
    assert one.decide(facts("mcp__gh__delete_repo")).action == "deny"
    # A `*` in a built-in tool's rule names no tool.
    assert PermissionPolicy(allow=["*"]).decide(facts("mcp__gh__search")).action == "ask"


def test_tool_names_keep_to_what_providers_accept() -> None:
    assert tool_name("gh", "search") == "mcp__gh__search"
    assert tool_name("gh", "repos.list/all") == "mcp__gh__repos_list_all"
    assert len(tool_name("gh", "x" * 100)) == 64


async def _never(
    server: str, tool: str, arguments: dict[str, object], on_progress: object
) -> dict[str, object]:
    raise AssertionError("not called")


def test_read_only_tools_run_beside_reads_only_when_the_server_allows_it() -> None:
    hinted = McpTool(name="look", annotations=ToolAnnotations(readOnlyHint=True))
    plain = McpTool(name="write")
    for allowed in (False, True):
        config = McpServerConfig(command="tool", parallel_reads=allowed)
        definition = ServerDefinition(name="gh", source="user", config=config)
        registry = ToolRegistry(mcp_tools([(definition, hinted), (definition, plain)], _never))
        look = registry.validate("mcp__gh__look", "{}")
        write = registry.validate("mcp__gh__write", "{}")
        assert isinstance(look, ToolParams)
        assert isinstance(write, ToolParams)
        assert registry.runs_concurrently("mcp__gh__look", look) is allowed
        assert registry.runs_concurrently("mcp__gh__write", write) is False
        assert not registry.is_read_only("mcp__gh__look")  # never a plain read to the gate


def test_the_daemon_imports_neither_the_mcp_sdk_nor_anyio() -> None:
    """The SDK is installed for the tests' own server; the daemon's client must not use it."""
    daemon = Path(__file__).resolve().parents[2] / "daemon"
    found: list[str] = []
    for source in sorted(daemon.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [
                f"{source.relative_to(daemon)}: {name}"
                for name in names
                if name.split(".")[0] in ("mcp", "mcp_types", "anyio")
            ]
    assert found == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://me:s3cret@mcp.example.com:8443/mcp?token=abc#x",
            "https://mcp.example.com:8443/mcp?…",
        ),
        ("http://127.0.0.1:9000/mcp", "http://127.0.0.1:9000/mcp"),
        ("http://[::1]:9000/mcp", "http://[::1]:9000/mcp"),
    ],
)
def test_a_server_s_url_is_named_without_its_password_or_query(url: str, shown: str) -> None:
    assert shown_url(url) == shown
