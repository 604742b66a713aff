"""Commands on the workspace's daemon: `tether daemon start|stop|restart|status|ensure`
(`logs` is `commands/logs.py`), and `tether doctor`, which checks what the daemon keeps
without it.

`ensure` is for `tether --remote` (and scripts): it starts the daemon unless one runs (or
`--no-start`) and prints one JSON line, `{"discovery": DiscoveryInfo | null, "started": bool,
"discoveryFile": path}`, the token included; exit 0 whether or not a daemon runs."""

import argparse
import sys
from pathlib import Path
from typing import cast

import msgspec

from tether.clients.cli import doctor
from tether.clients.cli.commands.output import print_json
from tether.clients.cli.environment import environment_words
from tether.clients.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.render import visible
from tether.clients.cli.targets import workspace as target_workspace
from tether.clients.core.discovery import (
    DaemonUnavailable,
    NotRunning,
    locate,
    probe_workspace,
    terminate_holder,
    wait_until_stopped,
)
from tether.clients.core.rpc import Client
from tether.protocol.discovery import DiscoveryInfo
from tether.protocol.methods import DAEMON_SHUTDOWN, DAEMON_STATUS, DaemonStatusResult
from tether.protocol.places import discovery_path

LOG_OPTIONS = {"follow": "-f", "level": "--level", "session": "--session", "lines": "-n"}
"""The options only `tether daemon logs` takes, by their argparse names."""


def cmd_daemon(args: argparse.Namespace) -> int:
    if args.action == "logs":
        from tether.clients.cli.commands.logs import cmd_logs

        return cmd_logs(args)
    given = [flag for name, flag in LOG_OPTIONS.items() if getattr(args, name) not in (None, False)]
    if given:
        raise CliError(f"{', '.join(given)}: only `tether daemon logs` takes this", EXIT_USAGE)
    workspace = target_workspace(args)
    if args.no_start and args.action != "ensure":
        raise CliError("--no-start goes with `tether daemon ensure`", EXIT_USAGE)
    if args.action == "ensure":
        return _ensure(args, workspace)
    if args.action == "start":
        return _start(args, workspace)
    if args.action == "restart":
        # Sessions are in the store and come back; a running turn ends interrupted.
        pid = _stop(workspace)
        if pid is not None and not args.json:
            print(f"tether daemon stopped (pid {pid})")
        return _start(args, workspace)
    if args.action == "stop":
        pid = _stop(workspace)
        if pid is None:
            if args.json:
                print_json({"running": False, "workspace": str(workspace)})
            else:
                print(f"no tether daemon is running for {workspace}")
        else:
            print(f"tether daemon stopped (pid {pid})")
        return EXIT_OK
    try:
        info = locate(workspace, autostart=False).info
    except NotRunning:
        if args.json:
            print_json({"running": False, "workspace": str(workspace)})
        else:
            print(f"no tether daemon is running for {workspace}")
        return EXIT_FAILED
    return _print_status(args, workspace, info.port)


def _start(args: argparse.Namespace, workspace: Path) -> int:
    located = locate(workspace, idle_timeout=args.idle_timeout)
    info, started = located.info, located.started
    fields = {
        "running": True,
        "started": started,
        "pid": info.pid,
        "port": info.port,
        "workspace": info.workspace,
        "version": info.daemon_version,
    }
    if args.json:
        print_json(fields)
    else:
        verb = "started" if started else "already running"
        print(f"tether daemon {verb}: pid {info.pid}, port {info.port}, {info.workspace}")
    return EXIT_OK


class Ensured(msgspec.Struct, kw_only=True, rename="camel"):
    discovery: DiscoveryInfo | None
    started: bool
    discovery_file: str


def _ensure(args: argparse.Namespace, workspace: Path) -> int:
    try:
        located = locate(workspace, autostart=not args.no_start, idle_timeout=args.idle_timeout)
    except NotRunning:
        answer = Ensured(
            discovery=None, started=False, discovery_file=str(discovery_path(workspace))
        )
    else:
        answer = Ensured(
            discovery=located.info,
            started=located.started,
            discovery_file=str(located.path or discovery_path(workspace)),
        )
    print(msgspec.json.encode(answer).decode(), flush=True)
    return EXIT_OK


def _stop(workspace: Path) -> int | None:
    """Stop the workspace's daemon and wait until it has; its pid, or None when none ran."""
    try:
        info = locate(workspace, autostart=False).info
    except NotRunning:
        return None
    except DaemonUnavailable as exc:
        if exc.holder is None:
            raise
        # It holds the workspace without serving it: no RPC reaches it, a signal does.
        terminate_holder(workspace, exc.holder)
        pid = exc.holder.pid
    else:
        with Client.connect(workspace, autostart=False) as client:
            running = client.call(DAEMON_STATUS).running_turns
            client.call(DAEMON_SHUTDOWN)
        if running:
            print(
                f"tether: {running} running turn(s) interrupted; send `continue` in their"
                " session to resume",
                file=sys.stderr,
            )
        pid = info.pid
    if not wait_until_stopped(workspace):
        raise CliError(f"the daemon (pid {pid}) did not stop within 15 s")
    return pid


SOURCES = {
    "client": "TETHER_{} of this shell",
    "daemon": "TETHER_{} the daemon was started with",
    "file": "config file",
    "default": "default",
}
"""How a setting's origin (`DaemonStatusResult.model_from`) is said; {} is the variable."""


def _print_status(args: argparse.Namespace, workspace: Path, port: int) -> int:
    with Client.connect(workspace, autostart=False) as client:
        status = client.call(DAEMON_STATUS)
    if args.json:
        data = cast("dict[str, object]", msgspec.to_builtins(status))
        data["running"] = True
        data["port"] = port
        print_json(data)
        return EXIT_OK
    print("\n".join(status_lines(status, port)))
    return EXIT_OK


def status_lines(status: DaemonStatusResult, port: int) -> list[str]:
    """`tether daemon status` in words."""

    def origin(source: str, variable: str) -> str:
        said = SOURCES.get(source, source).format(variable)
        return f" ({said})" if said else ""

    lines = [
        f"tether daemon running: pid {status.pid}, port {port}, {status.workspace}",
        f"  up {_duration(status.uptime_seconds)}, clients {status.clients}, sessions loaded"
        f" {status.sessions_loaded}, running turns {status.running_turns},"
        f" version {status.daemon_version}",
        f"  model     {visible(status.model)}{origin(status.model_from, 'MODEL')},"
        f" provider {status.provider}",
        f"  base URL  {visible(status.base_url)}{origin(status.base_url_from, 'BASE_URL')}",
        f"  config    {status.config_file}",
        f"  log       {status.log_file}",
    ]
    if status.workspace_trusted:
        lines.append("  trust     the workspace is trusted (tether trust --revoke withdraws it)")
    else:
        lines.append(
            "  trust     not trusted: language servers run restricted (tether trust to trust it)"
        )
    for chosen in status.session_models:
        running = ", running" if chosen.running else ""
        lines.append(f"  session {chosen.session_id} calls {visible(chosen.model)}{running}")
    if status.last_turn_environment is not None:
        whose = environment_words(status.last_turn_environment)
        lines.append(f"  last turn ran its commands in {whose}")
    if status.sandbox != "off":
        network = "network allowed" if status.sandbox_network else "no network"
        lines.append(f"  sandbox   {status.sandbox}, {network}")
        if status.sandbox_problem:
            lines.append(f"  commands do not run: {status.sandbox_problem}")
    if status.config_error:
        lines.append(
            f"  the config file is invalid, turns fail until it is fixed: {status.config_error}"
        )
    if status.restart_needed:
        lines.append(
            f"  changed since the daemon started: {', '.join(status.restart_needed)}; the"
            " daemon reads these only when it starts and still uses the old values: run"
            " `tether daemon restart` to apply them"
        )
    return lines


def _duration(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{value}{unit}" for value, unit in parts if value] or ["0s"]
    return " ".join(shown[:2])


def cmd_doctor(args: argparse.Namespace) -> int:
    workspace = target_workspace(args)
    held = probe_workspace(workspace)
    pid = held.record.pid if held is not None and held.record is not None else None
    lines, healthy = doctor.report(workspace, pid)
    print("\n".join(lines))
    return EXIT_OK if healthy else EXIT_FAILED
