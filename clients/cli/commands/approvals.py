"""`tether approvals` lists the workspace's pending approvals; `tether approve` and `tether
deny` answer one from any terminal.

Without a session, approve and deny answer the only pending approval of the workspace; when
there are several they ask which on a terminal, and without one they fail listing them
(EXIT_USAGE), so that a script never answers an approval it did not name.
"""

import argparse
import sys
import time

from tether.clients.cli.commands.output import print_json
from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.render import describe_subject, visible
from tether.clients.cli.targets import connect, resolve_session
from tether.clients.core.rpc import Client
from tether.protocol.events import Decision
from tether.protocol.methods import (
    APPROVAL_LIST,
    APPROVAL_RESPOND,
    ApprovalRespondParams,
    PendingApproval,
)


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def listing(pending: list[PendingApproval], *, numbered: bool = False) -> str:
    """One line per approval: session, id, tool, age, what it is about (escaped)."""
    now = time.time()
    lines: list[str] = []
    for index, p in enumerate(pending, 1):
        a = p.approval
        number = f"{index:>2}) " if numbered else ""
        lines.append(
            f"{number}{p.session_id}  {a.id}  {visible(a.tool):<12}"
            f" {_age(now - a.requested_at):>6}  {describe_subject(a)}"
        )
    return "\n".join(lines)


def cmd_approvals(args: argparse.Namespace) -> int:
    with connect(args) as client:
        pending = client.call(APPROVAL_LIST).approvals
    if args.json:
        print_json(pending)
    elif not pending:
        print("tether: no pending approvals", file=sys.stderr)
    else:
        print(listing(pending))
    return EXIT_OK


def _ask_which(pending: list[PendingApproval], verb: str) -> PendingApproval:
    sys.stderr.write(f"several approvals are pending:\n{listing(pending, numbered=True)}\n")
    while True:
        sys.stderr.write(f"which one to {verb}? [1-{len(pending)}] (Enter = none): ")
        sys.stderr.flush()
        line = sys.stdin.readline().strip()
        if not line:
            raise CliError("nothing answered")
        if line.isdigit() and 1 <= int(line) <= len(pending):
            return pending[int(line) - 1]
        sys.stderr.write(f"tether: '{visible(line)}' is not a number from 1 to {len(pending)}\n")


def _pick(client: Client, args: argparse.Namespace, verb: str) -> PendingApproval:
    pending = client.call(APPROVAL_LIST).approvals
    where = "the workspace"
    if args.session:
        session_id = resolve_session(client, args.session).id
        pending = [p for p in pending if p.session_id == session_id]
        where = f"session {session_id}"
    if args.approval:
        pending = [p for p in pending if p.approval.id.startswith(args.approval)]
        where = f"{where} matching '{visible(args.approval)}'"
    if not pending:
        raise CliError(f"no pending approval in {where}", EXIT_USAGE)
    if len(pending) == 1:
        return pending[0]
    if sys.stdin.isatty():
        return _ask_which(pending, verb)
    raise CliError(
        f"{len(pending)} approvals are pending in {where}; name one"
        f" (tether {verb} SESSION APPROVAL):\n{listing(pending)}",
        EXIT_USAGE,
    )


def cmd_answer(args: argparse.Namespace) -> int:
    decision: Decision = "allow" if args.command == "approve" else "deny"
    with connect(args) as client:
        picked = _pick(client, args, args.command)
        approval = picked.approval
        always = getattr(args, "always", False)
        if always and not approval.always_rule:
            raise CliError(
                f"approval {approval.id} offers no rule to allow always"
                f" ({visible(approval.reason)}); approve it without --always",
                EXIT_USAGE,
            )
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=picked.session_id,
                approval_id=approval.id,
                decision=decision,
                scope="always" if always else "once",
                message=args.message,
            ),
        )
    verb = "allowed" if decision == "allow" else "denied"
    print(f"{verb} {visible(approval.tool)}: {describe_subject(approval)}")
    if always:
        print(f"from now on the session allows {visible(approval.always_rule)}")
    return EXIT_OK
