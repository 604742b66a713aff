"""What the interactive mode knows of its session, kept from the attach snapshot and the
events after it, and the status line drawn from it. No I/O, no prompt_toolkit."""

from tether.protocol.events import (
    AnyEvent,
    ContextMeter,
    ContextUpdated,
    PermissionMode,
    SessionConfigured,
    SessionRenamed,
    TodoEntry,
    TodosUpdated,
    TurnCompleted,
    TurnStarted,
    Usage,
)
from tether.protocol.session import SessionInfo, SessionSnapshot


class ChatState:
    """The attached session's settings, meter, tokens and running turn. `session_id` is None
    until a session exists (a new one is created with the first message or setting)."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.title = ""
        self.model = ""
        """Chosen for the session; empty: the daemon's configured model (`default_model`)."""
        self.default_model = ""
        self.permission_mode: PermissionMode | None = None
        self.context = ContextMeter()
        self.tokens = Usage()
        self.todos: list[TodoEntry] = []
        self.clients = 0
        """Connections attached to the session, this one included."""
        self.running_turn: str | None = None
        self.turn_started_at: float | None = None
        """`time.monotonic()` when this client saw the running turn start."""

    def reset(self) -> None:
        """Forget the session (none is attached now); what the daemon serves stays known."""
        fresh = ChatState()
        fresh.default_model = self.default_model
        self.__dict__.update(fresh.__dict__)

    def from_info(self, info: SessionInfo) -> None:
        self.session_id = info.id
        self.title = info.title
        self.model = info.model
        self.permission_mode = info.permission_mode
        self.clients = max(info.clients, 1)

    def from_snapshot(self, snapshot: SessionSnapshot, now: float) -> None:
        self.from_info(snapshot.session)
        self.context = snapshot.context
        self.todos = snapshot.todos
        self.tokens = Usage(
            input_tokens=sum(t.usage.input_tokens for t in snapshot.turns),
            output_tokens=sum(t.usage.output_tokens for t in snapshot.turns),
        )
        running = [t for t in snapshot.turns if t.status == "running"]
        self.running_turn = running[-1].id if running else None
        self.turn_started_at = now if running else None

    def apply(self, event: AnyEvent, now: float) -> None:
        match event:
            case TurnStarted(turn_id=turn_id):
                self.running_turn = turn_id
                self.turn_started_at = now
            case TurnCompleted(turn_id=turn_id, usage=usage):
                if self.running_turn == turn_id:
                    self.running_turn = None
                    self.turn_started_at = None
                self.tokens = Usage(
                    input_tokens=self.tokens.input_tokens + usage.input_tokens,
                    output_tokens=self.tokens.output_tokens + usage.output_tokens,
                )
            case SessionConfigured(permission_mode=mode, model=model):
                if mode is not None:
                    self.permission_mode = mode
                if model is not None:
                    self.model = model
            case ContextUpdated(context=context):
                self.context = context
            case TodosUpdated(todos=todos):
                self.todos = todos
            case SessionRenamed(title=title):
                self.title = title
            case _:
                pass

    @property
    def model_shown(self) -> str:
        return self.model or self.default_model or "default model"

    def context_percent(self) -> int | None:
        if self.context.budget <= 0:
            return None
        return round(100 * self.context.used / self.context.budget)

    def status_line(self) -> str:
        """model · mode · context % · tokens · session · other clients. What is not known yet
        is left out: the mode until a session exists (the daemon's configured one applies),
        the tokens until a turn has ended (they are counted at its end)."""
        parts = [self.model_shown]
        if self.permission_mode is not None:
            parts.append(f"mode {self.permission_mode}")
        percent = self.context_percent()
        parts.append(f"context {percent}%" if percent is not None else "context -")
        tokens = self.tokens
        if tokens.input_tokens or tokens.output_tokens:
            used = f"{_short(tokens.input_tokens)} in / {_short(tokens.output_tokens)} out"
            parts.append(f"{used} before this turn" if self.running_turn else used)
        parts.append(self.session_id or "new session")
        others = self.clients - 1
        if others > 0:
            parts.append(f"{others} other client{'s' if others != 1 else ''} attached")
        return " · ".join(parts)


def _short(tokens: int) -> str:
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.1f}M"
    if tokens >= 10_000:
        return f"{tokens // 1000}k"
    if tokens >= 1000:
        return f"{tokens / 1000:.1f}k"
    return str(tokens)


def describe_context(context: ContextMeter) -> str:
    """The meter in words, for `/context`."""
    if context.budget <= 0:
        return f"context: {context.used:,} tokens used (budget unknown until the first model call)"
    percent = round(100 * context.used / context.budget)
    return (
        f"context: {context.used:,} of {context.budget:,} tokens ({percent}%);"
        " older history is summarised when it is full (or now, with /compact)"
    )


def describe_todos(todos: list[TodoEntry]) -> str:
    if not todos:
        return "no todos"
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
    return "\n".join(f"  {marks[t.status]} {t.content}" for t in todos)
