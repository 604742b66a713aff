"""Commands on the workspace's daemon: `tether daemon start|stop|status`, and `tether doctor`,
which checks what the daemon keeps without it."""

import argparse
from pathlib import Path

import msgspec

from tether.clients.cli import doctor
from tether.clients.cli.exit_codes import EXIT_FAILED, EXIT_OK, CliError
from tether.clients.cli.targets import workspace as target_workspace
from tether.clients.discovery import (
    DaemonUnavailable,
    NotRunning,
    locate,
    lock_path,
    probe_lock,
    terminate_holder,
    wait_until_stopped,
)
from tether.clients.rpc import Client
from tether.protocol.methods import DAEMON_SHUTDOWN, DAEMON_STATUS


def cmd_daemon(args: argparse.Namespace) -> int:
    workspace = target_workspace(args)
    if args.action == "start":
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
            print(msgspec.json.encode(fields).decode())
        else:
            verb = "started" if started else "already running"
            print(f"tether daemon {verb}: pid {info.pid}, port {info.port}, {info.workspace}")
        return EXIT_OK
    try:
        info = locate(workspace, autostart=False).info
    except NotRunning:
        if args.json:
            print(msgspec.json.encode({"running": False, "workspace": str(workspace)}).decode())
        else:
            print(f"no tether daemon is running for {workspace}")
        return EXIT_OK if args.action == "stop" else EXIT_FAILED
    except DaemonUnavailable as exc:
        if args.action != "stop" or exc.holder is None:
            raise
        # It holds the workspace without serving it: no RPC reaches it, a signal does.
        terminate_holder(workspace, exc.holder)
        pid = exc.holder.pid
    else:
        if args.action == "status":
            return _print_status(args, workspace, info.port)
        with Client.connect(workspace, autostart=False) as client:
            client.call(DAEMON_SHUTDOWN)
        pid = info.pid
    if not wait_until_stopped(workspace):
        raise CliError(f"the daemon (pid {pid}) did not stop within 15 s")
    print(f"tether daemon stopped (pid {pid})")
    return EXIT_OK


def _print_status(args: argparse.Namespace, workspace: Path, port: int) -> int:
    with Client.connect(workspace, autostart=False) as client:
        status = client.call(DAEMON_STATUS)
    if args.json:
        data = msgspec.to_builtins(status)
        assert isinstance(data, dict)
        data["running"] = True
        data["port"] = port
        print(msgspec.json.encode(data).decode())
    else:
        print(
            f"tether daemon running: pid {status.pid}, port {port}, {status.workspace}\n"
            f"  clients {status.clients}, sessions loaded {status.sessions_loaded},"
            f" running turns {status.running_turns}, version {status.daemon_version}"
        )
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    workspace = target_workspace(args)
    held = probe_lock(lock_path(workspace))
    pid = held.record.pid if held is not None and held.record is not None else None
    lines, healthy = doctor.report(workspace, pid)
    print("\n".join(lines))
    return EXIT_OK if healthy else EXIT_FAILED
