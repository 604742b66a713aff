"""Worktree sessions from the command line: `tether diff` shows a session's changes,
`tether merge` brings them into the workspace's branch, `tether worktrees` lists (or prunes)
the sessions' worktrees."""

import argparse
import sys

from tether.clients.cli.commands.output import print_json, print_listing
from tether.clients.cli.commands.sessions import age
from tether.clients.cli.exit_codes import EXIT_OK
from tether.clients.cli.render import visible
from tether.clients.cli.targets import connect, resolve_session
from tether.protocol.methods import (
    SESSION_DIFF,
    SESSION_MERGE,
    WORKTREE_LIST,
    WORKTREE_PRUNE,
    SessionMergeParams,
    SessionRef,
    WorktreeEntry,
)


def cmd_diff(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)
        found = client.call(SESSION_DIFF, SessionRef(session_id=session.id))
    if args.json:
        print_json(found)
    elif args.stat:
        for f in found.files:
            counts = "binary" if f.binary else f"+{f.added} -{f.removed}"
            print(f"{counts:>14}  {visible(f.path)}")
    else:
        sys.stdout.write(found.patch)
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    with connect(args) as client:
        session = resolve_session(client, args.session)
        done = client.call(
            SESSION_MERGE, SessionMergeParams(session_id=session.id, squash=args.squash)
        )
    if args.json:
        print_json(done)
    elif not done.commit:
        print(f"session {session.id} changed nothing; nothing to merge")
    elif not done.files:
        print(f"session {session.id} is merged already")
    else:
        how = "squashed" if args.squash else "merged"
        print(f"{how} session {session.id} as {done.commit[:12]}: {', '.join(done.files)}")
    return EXIT_OK


def cmd_worktrees(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.prune:
            removed = client.call(WORKTREE_PRUNE).removed
            if args.json:
                print_json(removed)
            else:
                for session_id in removed:
                    print(f"removed the worktree of session {session_id}")
                if not removed:
                    print("no merged worktrees to remove")
            return EXIT_OK
        worktrees = client.call(WORKTREE_LIST).worktrees
    return print_listing(worktrees, as_json=args.json, empty="no worktree sessions", line=describe)


def describe(w: WorktreeEntry) -> str:
    """A worktree on one line: its session, whether merged, its age, branch and folder."""
    state = "missing" if w.missing else "merged" if w.merged else "unmerged"
    when = age(w.age_seconds)
    return f"{w.session_id}  {state:<8}  {when:>8}  {visible(w.worktree.branch)}  {w.worktree.root}"
