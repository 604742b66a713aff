"""What the vscode tests stand on and can check without a VS Code: packing a `.vsix`, and
telling an installed harness from a missing or half-done one."""

import json
import zipfile
from pathlib import Path

import pytest

from tests.vscode.harness import CHROMIUM, NotInstalled, locate
from tests.vscode.vsix import extension_id, pack_vsix

FIXTURE = Path(__file__).resolve().parent / "fixture-ext"


def test_the_vsix_holds_the_extension_under_extension_and_names_it(tmp_path: Path) -> None:
    vsix = pack_vsix(FIXTURE, tmp_path / "fixture.vsix")

    with zipfile.ZipFile(vsix) as packed:
        names = set(packed.namelist())
        manifest = packed.read("extension.vsixmanifest").decode()
        types = packed.read("[Content_Types].xml").decode()
        package = json.loads(packed.read("extension/package.json"))
    assert names == {
        "[Content_Types].xml",
        "extension.vsixmanifest",
        "extension/package.json",
        "extension/extension.js",
    }
    assert 'Id="harness-fixture"' in manifest
    assert 'Publisher="tether-tests"' in manifest
    assert 'Extension=".js" ContentType="application/javascript"' in types
    assert package["main"] == "./extension.js"
    assert extension_id(FIXTURE) == "tether-tests.harness-fixture"


def test_a_file_of_unknown_type_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    source = tmp_path / "ext"
    source.mkdir()
    (source / "package.json").write_text(
        json.dumps({"name": "x", "publisher": "p", "version": "0.0.1"})
    )
    (source / "blob.wasm").write_bytes(b"\0asm")
    out = tmp_path / "x.vsix"

    with pytest.raises(ValueError, match=r"\.wasm"):
        pack_vsix(source, out)
    assert not out.exists()


def test_an_empty_cache_is_not_an_installation_and_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(NotInstalled, match=r"bash \.ci/install-vscode-e2e") as missing:
        locate(tmp_path)
    assert "code-server" in str(missing.value)


def test_an_install_that_did_not_finish_is_not_an_installation(tmp_path: Path) -> None:
    # npm unpacks code-server well before its native modules are built; only the stamp the
    # installer writes last says it is done.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "node").write_text("")
    entry = tmp_path / "code-server/node_modules/code-server/out/node/entry.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("")

    with pytest.raises(NotInstalled, match="stamp"):
        locate(tmp_path)

    (tmp_path / "installed").write_text("done\n")
    if CHROMIUM.exists():
        assert locate(tmp_path).code_server == entry
    else:
        with pytest.raises(NotInstalled, match="chromium"):
            locate(tmp_path)
