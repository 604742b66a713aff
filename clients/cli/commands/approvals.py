"""`tether approve` and `tether deny`: answer a pending approval from any terminal."""

import argparse

from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError
from tether.clients.cli.render import describe_subject, visible
from tether.clients.cli.targets import connect, resolve_session
from tether.clients.rpc import Client
from tether.protocol.events import ApprovalRequest, Decision
from tether.protocol.methods import (
    APPROVAL_RESPOND,
    SESSION_READ,
    ApprovalRespondParams,
    SessionRef,
)


def _pick_approval(client: Client, args: argparse.Namespace) -> tuple[str, ApprovalRequest]:
    session = resolve_session(client, args.session)
    snapshot = client.call(SESSION_READ, SessionRef(session_id=session.id)).snapshot
    pending = snapshot.pending_approvals
    if args.approval:
        pending = [a for a in pending if a.id.startswith(args.approval)]
    if not pending:
        what = f"matching {args.approval!r} " if args.approval else ""
        raise CliError(f"no approval {what}is pending in session {session.id}", EXIT_USAGE)
    if len(pending) > 1:
        listing = "\n".join(f"  {a.id}  {visible(a.tool)}: {describe_subject(a)}" for a in pending)
        raise CliError(f"several approvals are pending; name one:\n{listing}", EXIT_USAGE)
    return session.id, pending[0]


def cmd_answer(args: argparse.Namespace) -> int:
    decision: Decision = "allow" if args.command == "approve" else "deny"
    with connect(args) as client:
        session_id, approval = _pick_approval(client, args)
        client.call(
            APPROVAL_RESPOND,
            ApprovalRespondParams(
                session_id=session_id,
                approval_id=approval.id,
                decision=decision,
                scope="always" if getattr(args, "always", False) else "once",
                message=args.message,
            ),
        )
    verb = "allowed" if decision == "allow" else "denied"
    print(f"{verb} {visible(approval.tool)}: {describe_subject(approval)}")
    return EXIT_OK
