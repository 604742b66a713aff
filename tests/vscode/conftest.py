"""The `vscode` tests run only where `.ci/install-vscode-e2e` has installed the harness; else
they are skipped, saying so. Under CI (CI set), which runs that installer first, a missing
harness fails them instead, so a broken install cannot pass as a run of skips."""

import os

import pytest

from tests.vscode.harness import Installation, NotInstalled, locate


@pytest.fixture(scope="session")
def vscode_installation() -> Installation:
    try:
        return locate()
    except NotInstalled as missing:
        if os.environ.get("CI"):
            pytest.fail(str(missing))
        pytest.skip(str(missing))
