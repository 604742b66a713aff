"""The `web` tests run where Debian's chromium is installed (`.ci/install-vscode-e2e` installs
it, for tests/vscode too); else they are skipped, saying so. Under CI (CI set), which runs that
installer first, a missing chromium fails them instead."""

import os
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.vscode.harness import CHROMIUM, INSTALLER


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless chromium for the module (each test opens pages of its own)."""
    if not CHROMIUM.exists():
        missing = f"no chromium at {CHROMIUM}; run `bash {INSTALLER}`"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            yield browser
        finally:
            browser.close()
