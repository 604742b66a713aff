"""What a command can reach, as seen from inside the command sandbox: run by tests as
`python -I sandbox_probe.py SPEC` with SPEC a JSON object of what to try, it prints one JSON
object saying, for each thing, what happened. Standard library only: it runs under the real
interpreter inside bubblewrap.

SPEC keys (all optional): "read" (file paths), "list" (folder paths), "unix" (socket paths),
"abstract" (abstract socket names), "tcp" ([host, port] pairs), "env" (variable names)."""

import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any


def attempt(action: Callable[[], object]) -> str:
    try:
        result = action()
    except OSError as exc:
        return f"failed: {type(exc).__name__}"
    return f"ok: {result}"


def read(path: str) -> str:
    with open(path) as file:
        return file.read()


def connect_unix(address: str | bytes) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address)
    return "connected"


def connect_tcp(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=5):
        return "connected"


def main() -> None:
    spec: dict[str, list[Any]] = json.loads(sys.argv[1])
    found: dict[str, dict[str, str]] = {"read": {}, "list": {}, "unix": {}, "abstract": {},
                                         "tcp": {}, "env": {}}  # fmt: skip
    for path in spec.get("read", []):
        found["read"][path] = attempt(lambda path=path: read(path))
    for path in spec.get("list", []):
        found["list"][path] = attempt(lambda path=path: sorted(os.listdir(str(path))))
    for path in spec.get("unix", []):
        found["unix"][path] = attempt(lambda path=path: connect_unix(path))
    for name in spec.get("abstract", []):
        found["abstract"][name] = attempt(lambda name=name: connect_unix(b"\0" + name.encode()))
    for host, port in spec.get("tcp", []):
        found["tcp"][f"{host}:{port}"] = attempt(lambda h=host, p=port: connect_tcp(h, p))
    for name in spec.get("env", []):
        found["env"][name] = os.environ.get(name, "<unset>")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
