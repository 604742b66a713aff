"""The container image's command line, run for real short of building the image (a builder
is not on every machine; `.ci/check-container` builds it where one is): the daemon started as
packaging/Containerfile's ENTRYPOINT and CMD say, in the environment its ENV sets (its
absolute folders moved under a temporary root), serves; its HEALTHCHECK command passes while
it does; SIGTERM stops it cleanly. The workspace at the WORKDIR holds a `tether` package of its
own, which the daemon must not import (its Python runs with `-P`)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import free_port, plant_shadowing_package, wait_until

CONTAINERFILE = Path(__file__).parents[2] / "packaging" / "Containerfile"
TOKEN = "c4" * 32


def _instructions() -> dict[str, str]:
    """The Containerfile's instructions by name (the last of each; continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, rest = line.strip().partition(" ")
            found[name] = rest
    return found


def _env(spec: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in spec.split())


def test_the_image_command_serves_passes_its_health_check_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    found = _instructions()
    entrypoint: list[str] = json.loads(found["ENTRYPOINT"])
    command: list[str] = json.loads(found["CMD"])
    health: list[str] = json.loads(found["HEALTHCHECK"].split("CMD", 1)[1])
    assert entrypoint[:2] == ["tini", "--"], "the daemon must not run as PID 1"
    assert entrypoint[2] == "python"

    def moved(value: str) -> str:
        return str(tmp_path / value.lstrip("/")) if value.startswith("/") else value

    image_env = {name: moved(value) for name, value in _env(found["ENV"]).items()}
    for folder in ("/data", "/config", "/workspace", "/run/tether"):
        Path(moved(folder)).mkdir(parents=True, mode=0o700)
    secret = Path(moved("/run/secrets/tether/token"))
    secret.parent.mkdir(parents=True)
    secret.write_text(TOKEN)
    marker = tmp_path / "marker"
    plant_shadowing_package(Path(moved(found["WORKDIR"])), marker)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), **image_env}
    # The image's port, 8765, may be taken on a shared machine: the test's own free one
    # stands in for it.
    port_at = command.index("--port") + 1
    assert command[port_at] == "8765"
    port = free_port()
    args = [*entrypoint[3:], *command[:port_at], str(port), *command[port_at + 1 :]]
    daemon = subprocess.Popen(
        [sys.executable, *(moved(arg) for arg in args)],
        env=env,
        cwd=moved(found["WORKDIR"]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        runtime = Path(image_env["XDG_RUNTIME_DIR"]) / "tether"
        wait_until(lambda: any(runtime.glob("*.json")), "the discovery file", timeout=20)
        (discovery,) = runtime.glob("*.json")
        info = json.loads(discovery.read_text())
        assert (info["port"], info["token"], info["pid"]) == (port, TOKEN, daemon.pid)
        tether = Path(sys.executable).with_name("tether")
        probe = subprocess.run(
            [str(tether), *[moved(arg) for arg in health[1:]]],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert probe.returncode == 0, probe.stdout + probe.stderr
        assert str(daemon.pid) in probe.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        output = daemon.communicate(timeout=30)[0].decode()
    assert daemon.returncode == 0, output
    assert not marker.exists(), f"the workspace's code ran: {marker.read_text()}"
