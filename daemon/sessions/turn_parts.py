"""What one turn is made of, assembled once its settings and model are known: the context
each tool call runs with, the diagnostics reported after its edits, the permission gate, the
subagents and the loop that drives them, and the events that end it (`Turns` runs it).

The parts share the turn's state: the sandbox its commands run in, its hooks, its subagents
and the wire dialect of its model (tools' images are encoded for it), all set as the turn
gets going and read by calls that come later.
"""

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tether.daemon.config.settings import Config, PermissionsConfig, WorkspaceRules
from tether.daemon.hooks.notify import Notifier, notify_settings
from tether.daemon.hooks.turn import TurnHooks
from tether.daemon.logs.log import get_logger
from tether.daemon.lsp.pool import LspPool
from tether.daemon.lsp.report import format_report, wire_diagnostics
from tether.daemon.procs.sandbox import Sandbox
from tether.daemon.procs.shell import ShellChoice, command_shell
from tether.daemon.providers.base import ModelClient
from tether.daemon.sessions.approvals import SessionGate
from tether.daemon.sessions.hooks import post_tool_hooks, turn_hooks
from tether.daemon.sessions.images import ImageStore, ToolImages
from tether.daemon.sessions.loaded import LoadedSession
from tether.daemon.sessions.models import ModelSource
from tether.daemon.sessions.notifications import TurnNotifications
from tether.daemon.sessions.provider_choice import subagent_provider
from tether.daemon.sessions.session import Session, new_id
from tether.daemon.sessions.sink import Sink
from tether.daemon.sessions.subagents import Subagents
from tether.daemon.tools.base import ChangeTracker, ReadVersions, ToolContext
from tether.daemon.tools.images import IMAGES_SERVICE
from tether.daemon.tools.registry import ToolRegistry
from tether.daemon.tools.task import SUBAGENTS_SERVICE
from tether.daemon.tools.todo_write import TODOS_SERVICE
from tether.daemon.turn.loop import TurnLoop, TurnOutcome
from tether.daemon.turn.permissions import PermissionPolicy
from tether.protocol.events import (
    DiagnosticsReported,
    InputDropped,
    TodoEntry,
    TodosUpdated,
    TurnCompleted,
    TurnEndStatus,
    TurnError,
    Usage,
)
from tether.protocol.items import ToolCall, TurnSummary

log = get_logger(__name__)

UNTRUSTED_NOTICE = (
    "This workspace is not trusted, so its language servers run restricted (your own "
    "TypeScript and tether's Python, not the workspace's): if you trust its code, run "
    "`tether trust` for full diagnostics."
)


class _TodoBoard:
    """The session's todo list as tools see it."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def set(self, todos: list[TodoEntry]) -> None:
        self.session.emit(TodosUpdated(todos=todos))


class TurnParts:
    """The parts of one turn of `live` (its id `turn_id`, its events through `sink`)."""

    def __init__(
        self,
        live: LoadedSession,
        turn_id: str,
        sink: Sink,
        *,
        workspace: Path,
        models: ModelSource,
        changes: ChangeTracker,
        services: Mapping[str, object],
        protected: tuple[str, ...],
        lsp: LspPool | None = None,
        images: ImageStore | None = None,
        env: Mapping[str, str] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        """`services` are handed to tools; `protected` are the folders no edit may touch
        without asking (the skills'); `lsp` reports diagnostics after edits (None: none);
        `images` keeps the images tools return (None: tools return text only); `env` is the
        environment the turn's commands and hooks run in (None: the daemon's); `notifier`
        sends the turn's notifications (None: none)."""
        self.env = env
        self.notifier = notifier
        self.notifications: TurnNotifications | None = None
        """The turn's notifications, made with the loop from the settings it read."""
        self.live = live
        self.session = live.session
        self.turn_id = turn_id
        self.sink = sink
        self.workspace = workspace
        self.models = models
        self.changes = changes
        self.services = services
        self.protected = protected
        self.lsp = lsp
        self.images = images
        self.sandbox: Sandbox | None = None
        """Where the turn's commands run (None: unconfined), set before the loop is made."""
        self.shell: ShellChoice = "bash"
        """The shell the turn's commands run in (the `shell` setting), set with the sandbox."""
        self.hooks: TurnHooks | None = None
        self.subagents: Subagents | None = None
        self.dialect = ""
        """The wire dialect of the turn's model, once it is leased."""

    def context(self, item: ToolCall, versions: ReadVersions | None = None) -> ToolContext:
        """What the call `item` runs with (`versions`: a subagent's own file reads)."""
        services = {**self.services, TODOS_SERVICE: _TodoBoard(self.session)}
        if self.subagents is not None:
            services[SUBAGENTS_SERVICE] = self.subagents
        if self.images is not None:
            services[IMAGES_SERVICE] = ToolImages(self.images, self.session.id, self._dialect)
        return ToolContext(
            self.workspace,
            session_id=self.session.id,
            turn_id=self.turn_id,
            item_id=item.id,
            versions=self.live.versions if versions is None else versions,
            changes=self.changes,
            output=lambda text: self.sink.item_delta(item.id, text),
            progress=lambda report: self.sink.item_progress(item.id, report),
            services=services,
            sandbox=self.sandbox,
            shell=command_shell(self.shell),
            env=self.env,
        )

    def _dialect(self) -> str:
        return self.dialect

    async def diagnose(self, item: ToolCall, paths: list[Path]) -> str:
        """The language servers' report on the files `item` edited, for the model; what they
        found also goes to the clients (`diagnostics_reported`)."""
        if self.lsp is None:
            return ""
        check = await self.lsp.check_after_edit([self.workspace / path for path in paths])
        found = check.errors
        if found:
            self.session.emit(
                DiagnosticsReported(
                    turn_id=self.turn_id,
                    item_id=item.id,
                    diagnostics=wire_diagnostics(found, self.workspace),
                )
            )
        note = self.lsp.restricted_note()
        if note and not self.live.told_untrusted:
            self.live.told_untrusted = True
            self.sink.notice("info", "workspace_trust", UNTRUSTED_NOTICE)
        report = format_report(found, self.workspace, coverage=check.coverage)
        return f"{report}\n{note}" if report and note else report

    def policy(self, rules: WorkspaceRules, user: PermissionsConfig) -> PermissionPolicy:
        """The permission rules of this turn: the session's mode and rules, the user's, and
        the workspace's (which may only ask or deny more); under `shell = "user"` every
        command that is more than plain words asks."""
        policy = PermissionPolicy(
            mode=self.session.permission_mode,
            allow=user.allow,
            ask=[*user.ask, *rules.ask],
            deny=[*user.deny, *rules.deny],
            protected=self.protected,
            sandbox=self.sandbox is not None,
            user_shell=self.shell == "user",
        )
        policy.session_rules = self.session.session_rules
        return policy

    def loop(
        self, config: Config, model: ModelClient, rules: WorkspaceRules, tools: ToolRegistry
    ) -> TurnLoop:
        """The loop of the turn with `model` under `config`, offering `tools`; makes the
        turn's hooks and subagents on the way."""
        self.dialect = model.provider
        policy = self.policy(rules, config.permissions)
        self.hooks = hooks = turn_hooks(
            config.hooks,
            workspace=self.workspace,
            session_id=self.session.id,
            turn_id=self.turn_id,
            notify=self.sink.notice,
            services=self.services,
            env=self.env,
        )
        after_tool = post_tool_hooks(hooks, tools, self.workspace) if hooks else None
        if self.notifier is not None:
            settings = notify_settings(config, env=self.env, cwd=self.workspace)
            self.notifications = TurnNotifications(
                self.notifier, self.session, self.workspace, settings
            )

        def gate(
            tools: ToolRegistry,
            subagent: str = "",
            context: Callable[[ToolCall], ToolContext] = self.context,
        ) -> SessionGate:
            return SessionGate(
                session=self.session,
                broker=self.live.broker,
                policy=policy,
                tools=tools,
                workspace=self.workspace,
                turn_id=self.turn_id,
                context=context,
                prewarm=(lambda path: lsp.prewarm([path]))
                if (lsp := self.lsp) is not None
                else None,
                subagent=subagent,
                hooks=hooks,
                notifications=self.notifications,
            )

        provider = subagent_provider(self.session, config)
        self.subagents = Subagents(
            session=self.session,
            turn_id=self.turn_id,
            sink=self.sink,
            tools=tools,
            lease=lambda: self.models.lease(provider),
            model=provider.model,
            gate=gate,
            context=self.context,
            workspace=self.workspace,
            max_steps=config.max_steps,
            diagnose=self.diagnose,
            window=provider.context_window,
            max_output=provider.max_output_tokens,
            after_tool=after_tool,
        )
        self.live.context.configure(
            model=model,
            window=config.provider.context_window,
            max_output=config.provider.max_output_tokens,
        )
        return TurnLoop(
            model=model,
            tools=tools,
            tool_context=self.context,
            history=self.live.history,
            sink=self.sink,
            new_id=lambda: new_id("i"),
            gate=gate(tools),
            compactor=self.live.context,
            diagnose=self.diagnose,
            max_steps=config.max_steps,
            after_tool=after_tool("") if after_tool else None,
        )

    def usage(self, loop: TurnLoop | None, outcome: TurnOutcome | None) -> Usage:
        """What the turn used in all: its own model calls and its subagents'."""
        if outcome is not None:
            usage = outcome.usage
        else:
            usage = loop.usage() if loop is not None else Usage()
        if self.subagents is None:
            return usage
        return Usage(
            input_tokens=usage.input_tokens + self.subagents.input_tokens,
            output_tokens=usage.output_tokens + self.subagents.output_tokens,
        )

    def announce_end(
        self,
        status: TurnEndStatus,
        error: TurnError | None,
        *,
        started: float,
        loop: TurnLoop | None,
        outcome: TurnOutcome | None,
    ) -> None:
        """End the turn (begun at monotonic `started`) in its events: the messages still
        queued are dropped, then its summary item and `turn_completed`."""
        session = self.session
        if status == "interrupted":
            error = TurnError(
                code="interrupted",
                message="The daemon stopped while this turn ran. Send `continue` to resume.",
            )
        if session.queued_inputs:
            session.emit(
                InputDropped(
                    input_ids=list(session.queued_inputs),
                    reason=f"the turn ended ({status}) before taking them",
                )
            )
        usage = self.usage(loop, outcome)
        summary = TurnSummary(
            id=new_id("i"),
            stop_reason=status,
            duration_seconds=round(time.monotonic() - started, 3),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            tokens_estimated=loop is not None and loop.tokens_estimated,
            model_calls=loop.model_calls if loop is not None else 0,
            files_changed=self.changes.files_changed(),
        )
        self.sink.item_started(summary)
        self.sink.item_completed(summary)
        log.info(
            "turn ended",
            status=status,
            error=None if error is None else error.code,
            steps=summary.model_calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            seconds=summary.duration_seconds,
        )
        session.emit(
            TurnCompleted(
                turn_id=self.turn_id,
                status=status,
                ended_at=time.time(),
                usage=usage,
                error=error,
            )
        )
