"""The harness drives a real VS Code: it installs the fixture extension's `.vsix`, opens the
extension's webview view from the command palette, clicks its button and sees the extension
host's answer in the page."""

from pathlib import Path

import pytest

from tests.vscode.harness import Installation, open_vscode
from tests.vscode.vsix import extension_id, pack_vsix

pytestmark = pytest.mark.vscode

FIXTURE = Path(__file__).resolve().parent / "fixture-ext"


def test_webview_view_button_round_trips_through_the_extension(
    vscode_installation: Installation, tmp_path: Path
) -> None:
    vsix = pack_vsix(FIXTURE, tmp_path / "fixture.vsix")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# scratch\n")

    with open_vscode(tmp_path / "code-server", folder, [vsix], vscode_installation) as workbench:
        workbench.run_command("Harness Fixture: Open View")
        view = workbench.webview(extension_id(FIXTURE))
        workbench.expect_text(view, "status", "not pressed")

        workbench.click(view, "press")
        workbench.expect_text(view, "status", "pressed 1")
        workbench.click(view, "press")
        workbench.expect_text(view, "status", "pressed 2")
        assert workbench.text(view, "status") == "pressed 2"
