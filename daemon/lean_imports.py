"""What the daemon's process keeps out of its imports.

httpx's package imports its own command-line tool, `httpx._main`, at the top of
`httpx/__init__.py`, and that module pulls in rich, click and pygments whenever they are
installed — as rich is, for tether's CLI. In the daemon, which never runs httpx's command
line, that is some 90 modules and 50-70 ms of every cold start. `skip_httpx_cli` puts a
stand-in for that module in place before httpx is first imported; httpx takes only `main`
from it.
"""

import sys
import types

HTTPX_CLI = "httpx._main"


def skip_httpx_cli() -> None:
    """Install the stand-in for `httpx._main`, unless httpx (or its CLI) is already loaded."""
    if "httpx" in sys.modules or HTTPX_CLI in sys.modules:
        return
    stand_in = types.ModuleType(HTTPX_CLI, "httpx's command line, not loaded in the daemon")

    def main() -> None:
        raise SystemExit("httpx's command line is not loaded in the tether daemon")

    stand_in.main = main  # pyright: ignore[reportAttributeAccessIssue]
    sys.modules[HTTPX_CLI] = stand_in
