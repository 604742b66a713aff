"""The code-intelligence tools while the language server is still indexing, against a tiny
real language server process that indexes for as long as the test says: what it answers
then (nothing, or "content modified") is told to the model as "still indexing, try again",
and the same call answers once it is done."""

import sys
from pathlib import Path

import pytest
import trio

from tests.unit.test_lsp_pool import SERVER_FRAMING, serving
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.servers import LspServerConfig
from tether.daemon.tools.base import ToolContext, ToolFailure
from tether.daemon.tools.code_intel import INDEXING, LSP_SERVICE, SymbolAtParams
from tether.daemon.tools.find_definition import FindDefinition
from tether.daemon.tools.hover import Hover

INDEXING_SERVER = (
    SERVER_FRAMING
    + r'''
"""A language server that indexes while the file named by argv[1] exists: meanwhile its
hovers are empty and its definitions refused as ContentModified, as real servers do."""
import os

marker = sys.argv[1]


def definition(params):
    start, end = {"line": 0, "character": 4}, {"line": 0, "character": 17}
    return [{"uri": params["textDocument"]["uri"], "range": {"start": start, "end": end}}]


while True:
    message = read()
    method, params = message.get("method"), message.get("params")
    if "id" not in message or method is None:
        continue  # a notification, or an answer to a request of ours
    indexing = os.path.exists(marker)
    if method == "initialize":
        capabilities = {"textDocumentSync": 1, "definitionProvider": True, "hoverProvider": True}
        write({"id": message["id"], "result": {"capabilities": capabilities}})
    elif method == "textDocument/definition" and indexing:
        write({"id": message["id"], "error": {"code": -32801, "message": "content modified"}})
    elif method == "textDocument/definition":
        write({"id": message["id"], "result": definition(params)})
    elif method == "textDocument/hover":
        contents = {"kind": "markdown", "value": "def compute_total() -> float"}
        write({"id": message["id"], "result": None if indexing else {"contents": contents}})
    elif method == "exit":
        sys.exit(0)
    else:
        write({"id": message["id"], "result": None})
'''
)

APP = "def compute_total() -> float:\n    return compute_total()\n"


async def test_a_call_while_the_server_indexes_says_so_and_answers_once_it_is_done(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text(APP)
    script = tmp_path / "indexing_server.py"
    script.write_text(INDEXING_SERVER)
    indexing = tmp_path / "indexing"
    indexing.touch()
    server = LspServerConfig(
        name="slow", command=[sys.executable, "-I", str(script), str(indexing)], extensions=[".py"]
    )
    pool = LspPool(root, [server], builtin=False)
    ctx = ToolContext(root, services={LSP_SERVICE: pool})
    call = SymbolAtParams(path="app.py", line=2, symbol="compute_total")
    told = INDEXING.format(server="slow")
    assert "still indexing" in told
    with trio.fail_after(30):
        async with serving(pool):
            # Started by this very call, the server has nothing yet: it is still indexing.
            with pytest.raises(ToolFailure) as started:
                await Hover().run(call, ctx)
            assert str(started.value) == told
            # Running since, it refuses the question as "content modified": the same.
            with pytest.raises(ToolFailure) as refused:
                await FindDefinition().run(call, ctx)
            assert str(refused.value) == told
            # An empty answer from a server that did not just start is an answer.
            assert await Hover().run(call, ctx) == (
                "slow has nothing to show for compute_total at app.py:2."
            )

            indexing.unlink()
            assert (await FindDefinition().run(call, ctx)).splitlines() == [
                "compute_total is defined at:",
                "  app.py:1: def compute_total() -> float:",
            ]
            assert await Hover().run(call, ctx) == "def compute_total() -> float"
