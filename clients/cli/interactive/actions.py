"""What each slash command does (the table is `slash.COMMANDS`). Each takes the chat and the
argument text; what goes wrong with the daemon is told as a line, never raised to the prompt."""

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast, get_args

from tether.clients.cli.exit_codes import CliError
from tether.clients.cli.images import check_together, read_image
from tether.clients.cli.interactive.slash import help_text, parse
from tether.clients.cli.interactive.state import describe_context, describe_todos
from tether.clients.cli.render import visible
from tether.clients.cli.targets import resolve_session
from tether.clients.core.rpc import CallError
from tether.protocol.events import PermissionMode
from tether.protocol.images import describe_size
from tether.protocol.methods import (
    HOOKS_LIST,
    MCP_STATUS,
    MODELS_LIST,
    PROCESS_LIST,
    PROCESS_OUTPUT,
    SESSION_COMPACT,
    SESSION_CONFIGURE,
    SESSION_FORK,
    SESSION_RENAME,
    SESSION_UNDO,
    SKILLS_LIST,
    WORKSPACE_TRUST,
    Empty,
    ProcessOutputParams,
    SessionConfigureParams,
    SessionForkParams,
    SessionRef,
    SessionRenameParams,
    SessionUndoParams,
    WorkspaceTrustParams,
)

if TYPE_CHECKING:
    from tether.clients.cli.interactive.chat import Chat

Action = Callable[["Chat", str], Awaitable[None]]


async def run_slash(chat: "Chat", text: str) -> None:
    """Run the slash command `text` names, or say that none has that name."""
    command, name, argument = parse(text)
    if command is None:
        chat.note(f"tether: no command {visible(name)}; /help lists them")
        return
    if command.needs_argument and not argument:
        chat.note(f"tether: {command.name} {command.arguments}: {command.summary}")
        return
    try:
        await ACTIONS[command.name](chat, argument)
    except CallError as exc:
        chat.note(f"tether: {visible(exc.message)}")
    except CliError as exc:
        chat.note(f"tether: {exc}")


async def _help(chat: "Chat", argument: str) -> None:
    chat.note(help_text())


async def _new(chat: "Chat", argument: str) -> None:
    await chat.detach()
    chat.note("tether: new session (it starts with your next message)")


async def _sessions(chat: "Chat", argument: str) -> None:
    chosen = await chat.pick_session()
    if chosen is not None:
        await chat.switch_to(chosen)


async def _attach(chat: "Chat", argument: str) -> None:
    session = await chat.in_thread(lambda: resolve_session(chat.client, argument))
    await chat.switch_to(session.id)


async def _fork(chat: "Chat", argument: str) -> None:
    session_id = chat.state.session_id
    if session_id is None:
        chat.note("tether: nothing to fork in a new session")
        return
    running = chat.state.running_turn
    result = await chat.call(SESSION_FORK, SessionForkParams(session_id=session_id))
    fork = result.session
    turns = f"{fork.turn_count} turn{'s' if fork.turn_count != 1 else ''}"
    left = f"; the running turn goes on in {session_id}" if running else ""
    chat.note(f"tether: forked {session_id} into {fork.id} ({turns}{left}). {visible(result.note)}")
    await chat.switch_to(fork.id)


async def _rename(chat: "Chat", argument: str) -> None:
    session_id = await chat.ensure_session()
    result = await chat.call(
        SESSION_RENAME, SessionRenameParams(session_id=session_id, title=argument)
    )
    title = result.session.title
    chat.note(f"tether: title: {visible(title)}" if title else "tether: no title yet")


async def _undo(chat: "Chat", argument: str) -> None:
    session_id = chat.state.session_id
    if session_id is None:
        chat.note("tether: nothing to undo in a new session")
        return
    force = argument == "force"
    result = await chat.call(SESSION_UNDO, SessionUndoParams(session_id=session_id, force=force))
    if not result.applied:
        files = "\n".join(f"  {visible(path)}" for path in result.conflicts)
        chat.note(
            f"tether: these files changed after turn {result.turn_id} ended:\n{files}\n"
            "nothing was undone; `/undo force` overwrites them too"
        )
        return
    lines = [f"restored {visible(p)}" for p in result.restored]
    lines += [f"removed  {visible(p)}" for p in result.removed]
    if result.note:
        lines.append(visible(result.note))
    chat.note("\n".join(lines) or f"tether: undid turn {result.turn_id}")


async def _compact(chat: "Chat", argument: str) -> None:
    session_id = chat.state.session_id
    if session_id is None:
        chat.note("tether: nothing to compact in a new session")
        return
    chat.note("tether: compacting…")
    result = await chat.call(SESSION_COMPACT, SessionRef(session_id=session_id))
    if result.compacted:
        chat.note(f"tether: compacted: {result.tokens_before:,} -> {result.tokens_after:,} tokens")
    else:
        chat.note(f"tether: nothing compacted: {visible(result.reason)}")


async def _model(chat: "Chat", argument: str) -> None:
    if not argument:
        listed = await chat.call(MODELS_LIST, Empty())
        chat.models = [m.id for m in listed.models]
        chat.state.default_model = listed.current
        current = chat.state.model or listed.current
        lines = [f"  {'*' if m.id == current else ' '} {visible(m.id)}" for m in listed.models]
        chat.note(
            "\n".join([f"models of {visible(listed.provider)}:", *lines, "/model NAME switches"])
        )
        return
    session_id = await chat.ensure_session()
    await chat.call(
        SESSION_CONFIGURE, SessionConfigureParams(session_id=session_id, model=argument)
    )
    if chat.models and argument not in chat.models:
        chat.note(f"tether: {visible(argument)} is not among the models the provider lists")


async def _mode(chat: "Chat", argument: str) -> None:
    modes = get_args(PermissionMode)
    if not argument:
        chat.note(
            f"tether: permission mode: {chat.state.permission_mode or 'default'}"
            " (ask: edits and commands ask; edits: commands ask; auto: nothing asks)"
        )
        return
    if argument not in modes:
        chat.note(f"tether: the mode is one of {', '.join(modes)}, not {visible(argument)}")
        return
    mode = cast("PermissionMode", argument)
    chat.permission_mode = mode
    if chat.state.session_id is None:  # created in that mode: no change to announce
        await chat.ensure_session()
        chat.note(f"tether: permission mode: {mode}")
        return
    await chat.call(
        SESSION_CONFIGURE,
        SessionConfigureParams(session_id=chat.state.session_id, permission_mode=mode),
    )


async def _todos(chat: "Chat", argument: str) -> None:
    chat.note(describe_todos(chat.state.todos))


async def _context(chat: "Chat", argument: str) -> None:
    chat.note(describe_context(chat.state.context))


async def _processes(chat: "Chat", argument: str) -> None:
    processes = (await chat.call(PROCESS_LIST, Empty())).processes
    if not processes:
        chat.note("no background processes")
        return
    lines: list[str] = []
    for p in processes:
        code = "" if p.exit_code is None else f" ({p.exit_code})"
        lines.append(f"{p.id}  pid {p.pid:<7} {p.status}{code}  {visible(p.command)}")
        try:
            output = await chat.call(PROCESS_OUTPUT, ProcessOutputParams(process_id=p.id))
        except CallError:
            continue  # it ended and was forgotten since the list
        tail = output.text.splitlines()[-PROCESS_TAIL_LINES:]
        lines += [f"  │ {visible(line)}" for line in tail]
    chat.note("\n".join(lines))


PROCESS_TAIL_LINES = 5
"""Lines of each background process's latest output that `/processes` shows."""


async def _skills(chat: "Chat", argument: str) -> None:
    from tether.clients.cli.commands.skills import describe_skills

    chat.note(describe_skills(await chat.call(SKILLS_LIST, Empty())))


async def _mcp(chat: "Chat", argument: str) -> None:
    from tether.clients.cli.commands.mcp import describe_status

    chat.note(describe_status(await chat.call(MCP_STATUS, Empty())))


async def _trust(chat: "Chat", argument: str) -> None:
    """`/trust` trusts the workspace, `/trust revoke` withdraws it, `/trust status` asks."""
    from tether.clients.cli.commands.trust import describe_trust

    answers = {"": True, "revoke": False, "status": None}
    if argument not in answers:
        chat.note("tether: /trust takes nothing, status or revoke")
        return
    params = WorkspaceTrustParams(trusted=answers[argument])
    chat.note(describe_trust(await chat.call(WORKSPACE_TRUST, params)))


async def _hooks(chat: "Chat", argument: str) -> None:
    from tether.clients.cli.commands.hooks import describe_hooks

    chat.note(describe_hooks(await chat.call(HOOKS_LIST, Empty())))


async def _image(chat: "Chat", argument: str) -> None:
    """`/image FILE` adds an image file to the next message, `/image clear` takes them off."""
    if argument == "clear":
        chat.images.clear()
        chat.note("tether: no image goes with your next message")
        return
    image = read_image(argument)
    check_together([*chat.images, image])
    chat.images.append(image)
    names = ", ".join(f"{visible(i.name)} ({describe_size(len(i.data))})" for i in chat.images)
    chat.note(f"tether: with your next message: {names}")


async def _cancel(chat: "Chat", argument: str) -> None:
    await chat.cancel()


async def _exit(chat: "Chat", argument: str) -> None:
    chat.leave()


ACTIONS: dict[str, Action] = {
    "/help": _help,
    "/new": _new,
    "/sessions": _sessions,
    "/attach": _attach,
    "/fork": _fork,
    "/rename": _rename,
    "/undo": _undo,
    "/compact": _compact,
    "/image": _image,
    "/model": _model,
    "/mode": _mode,
    "/todos": _todos,
    "/context": _context,
    "/processes": _processes,
    "/skills": _skills,
    "/mcp": _mcp,
    "/trust": _trust,
    "/hooks": _hooks,
    "/cancel": _cancel,
    "/exit": _exit,
}
