"""What the daemon's start leaves behind in its own process: the garbage collector, off while
it imports, runs again once it serves, with what the start made frozen out of its passes; and
httpx is loaded without its command line (rich, click, pygments).
Only the daemon's process can say, so it runs as a subprocess that looks at itself."""

import subprocess
import sys
from pathlib import Path

from tests.support import Home

_LOOK_WHILE_SERVING = """
import gc, os, signal, sys, threading, time
from pathlib import Path

import tether.daemon.__main__ as daemon_main

discovery, workspace = Path(sys.argv[1]), sys.argv[2]
seen = []

def look() -> None:
    while not discovery.exists():
        time.sleep(0.01)
    seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
    seen.append(sorted(m for m in ("rich", "click", "pygments") if m in sys.modules))
    seen.append("httpx" in sys.modules)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=look, daemon=True).start()
code = daemon_main.main(["--workspace", workspace, "--idle-timeout", "0"])
print(code, seen)
"""


def test_the_daemon_serves_with_the_collector_on_and_its_start_frozen(tmp_path: Path) -> None:
    home = Home(tmp_path)
    workspace = (tmp_path / "project").resolve()
    workspace.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-c",
            _LOOK_WHILE_SERVING,
            str(home.discovery_path(workspace)),
            str(workspace),
        ],
        env=home.env,
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Serving, with httpx (the model clients) but not what httpx's own command line loads.
    assert done.stdout.strip() == "0 [(True, True), [], True]", done.stderr
