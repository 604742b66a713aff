// A session folded from its snapshot and events, the way the daemon builds its snapshots
// (`Session._apply` in daemon/sessions/session.py), so a UI renders from state.
//
// Rules:
// - Items live in their turn, in the order they started. A delta appends to the item's text
//   (agent messages, reasoning) or output (tool calls); `item_completed` replaces the item
//   with its authoritative copy.
// - A delta carrying `progress` (a running tool call's report) sets the call's `progress`
//   in its turn, replacing the last one; `item_completed` drops it.
// - A user message item takes its input out of the queued inputs.
// - `item_updated` replaces an item that stays open (a task call's subagent left the queue).
// - A subagent's items carry `parentItemId`, the id of the `task` call that started it: they
//   live in the turn like every item, and `children(id)` / `topLevel()` give the nesting.
// - Event types, item types and fields this library does not know are ignored: an unknown
//   event changes nothing, an unknown item is not kept, unknown fields ride along untouched.
// - Objects are replaced, never changed in place, so a renderer can compare by identity.

import type {
  AnyEvent,
  AnyItem,
  ApprovalRequest,
  ContextMeter,
  QueuedInput,
  SessionEventParams,
  SessionInfo,
  SessionSnapshot,
  TodoEntry,
  ToolProgress,
  TurnError,
  TurnSnapshot,
  Usage,
} from "./protocol.js";

type TurnStatus = TurnSnapshot["status"];

const ITEM_TYPES: ReadonlySet<string> = new Set<AnyItem["type"]>([
  "user_message",
  "agent_message",
  "reasoning",
  "tool_call",
  "notice",
  "turn_summary",
  "compaction",
]);

/** One turn as the view holds it. */
export class TurnView {
  status: TurnStatus = "running";
  endedAt: number | null = null;
  usage: Usage = {};
  error: TurnError | null = null;
  /** By id, in the order they started. */
  readonly items = new Map<string, AnyItem>();
  /** Items started and not yet completed. */
  readonly open = new Set<string>();
  /** The last progress each running tool call reported, by item id. */
  readonly progress = new Map<string, ToolProgress>();

  constructor(
    readonly id: string,
    readonly startedAt: number,
  ) {}

  /** The turn's own items (not a subagent's), in the order they started. */
  topLevel(): AnyItem[] {
    return [...this.items.values()].filter((item) => !item.parentItemId);
  }

  /** The items of the subagent that the task call `parentId` started, in order. */
  children(parentId: string): AnyItem[] {
    return [...this.items.values()].filter((item) => item.parentItemId === parentId);
  }

  /** The turn as the daemon's snapshot shows it. */
  snapshot(): TurnSnapshot {
    const turn: TurnSnapshot = { id: this.id, status: this.status, startedAt: this.startedAt };
    if (this.endedAt !== null) turn.endedAt = this.endedAt;
    if (this.items.size > 0) turn.items = [...this.items.values()];
    if (Object.keys(this.usage).length > 0) turn.usage = this.usage;
    if (this.error !== null) turn.error = this.error;
    return turn;
  }
}

export class SessionView {
  /** The session as the attach found it, with the title, model and mode events since. */
  #info: SessionInfo;
  epoch: string;
  /** The seq of the last event folded in. */
  seq: number;
  readonly turns: TurnView[] = [];
  readonly pendingApprovals = new Map<string, ApprovalRequest>();
  readonly queuedInputs = new Map<string, QueuedInput>();
  todos: TodoEntry[] = [];
  context: ContextMeter = {};
  #turnsById = new Map<string, TurnView>();

  constructor(snapshot: SessionSnapshot) {
    this.#info = snapshot.session;
    this.epoch = snapshot.epoch;
    this.seq = snapshot.seq;
    for (const turn of snapshot.turns ?? []) {
      const view = new TurnView(turn.id, turn.startedAt);
      view.status = turn.status;
      view.endedAt = turn.endedAt ?? null;
      view.usage = turn.usage ?? {};
      view.error = turn.error ?? null;
      for (const item of turn.items ?? []) {
        if (!ITEM_TYPES.has(item.type)) continue;
        view.items.set(item.id, item);
        // A snapshot does not say which items are still open; in a running turn, streamed
        // kinds and running tool calls are the ones deltas may continue.
        if (turn.status === "running") view.open.add(item.id);
      }
      this.#addTurn(view);
    }
    for (const approval of snapshot.pendingApprovals ?? []) this.pendingApprovals.set(approval.id, approval);
    for (const input of snapshot.queuedInputs ?? []) this.queuedInputs.set(input.inputId, input);
    this.todos = snapshot.todos ?? [];
    this.context = snapshot.context ?? {};
  }

  /**
   * The session as it is now: what the attach found, with the events folded in since (its
   * title, model and permission mode, and the status, state and turn count its turns give).
   */
  get info(): SessionInfo {
    const running = this.runningTurn;
    return {
      ...this.#info,
      status: running ? "running" : "idle",
      turnCount: this.turns.length,
      state: running
        ? this.pendingApprovals.size > 0
          ? "awaiting_approval"
          : "running"
        : stateAfter(this.turns.at(-1)?.status),
    };
  }

  /** The running turn, if any (only the last turn can be running). */
  get runningTurn(): TurnView | undefined {
    const last = this.turns.at(-1);
    return last?.status === "running" ? last : undefined;
  }

  turn(id: string): TurnView | undefined {
    return this.#turnsById.get(id);
  }

  /**
   * Fold one event in (the caller keeps the seq order). Returns whether the event was of a
   * type this view knows; an unknown one changes nothing but the seq.
   */
  apply(params: SessionEventParams): boolean {
    this.seq = params.seq;
    return this.#apply(params.event as AnyEvent | { type?: unknown });
  }

  #apply(event: AnyEvent | { type?: unknown }): boolean {
    const e = event as AnyEvent;
    switch (e.type) {
      case "item_delta": {
        const turn = this.#turnsById.get(e.turnId);
        const item = turn?.items.get(e.itemId);
        if (turn === undefined || item === undefined) return true;
        if (e.progress !== undefined && e.progress !== null) turn.progress.set(item.id, e.progress);
        if (e.delta) turn.items.set(item.id, withDelta(item, e.delta));
        return true;
      }
      case "item_started":
      case "item_updated":
      case "item_completed": {
        const item = e.item;
        if (!ITEM_TYPES.has(item.type)) return true;
        if (item.type === "user_message") this.queuedInputs.delete(item.id);
        const turn = this.#turnsById.get(e.turnId);
        if (turn !== undefined) {
          turn.items.set(item.id, item);
          if (e.type === "item_completed") {
            turn.open.delete(item.id);
            turn.progress.delete(item.id);
          } else turn.open.add(item.id);
        }
        return true;
      }
      case "turn_started":
        this.#addTurn(new TurnView(e.turnId, e.startedAt));
        return true;
      case "turn_completed": {
        const turn = this.#turnsById.get(e.turnId);
        if (turn !== undefined) {
          turn.status = e.status;
          turn.endedAt = e.endedAt;
          turn.usage = e.usage ?? {};
          turn.error = e.error ?? null;
          turn.open.clear();
          turn.progress.clear();
        }
        return true;
      }
      case "session_renamed":
        this.#info = { ...this.#info, title: e.title };
        return true;
      case "session_configured": {
        const next = { ...this.#info };
        if (e.permissionMode !== undefined && e.permissionMode !== null) next.permissionMode = e.permissionMode;
        if (e.model !== undefined && e.model !== null) next.model = e.model;
        this.#info = next;
        return true;
      }
      case "approval_requested":
        this.pendingApprovals.set(e.approval.id, e.approval);
        return true;
      case "approval_resolved":
        this.pendingApprovals.delete(e.approvalId);
        return true;
      case "input_queued": {
        const input: QueuedInput = { inputId: e.inputId, text: e.text };
        if (e.by) input.by = e.by;
        if (e.context) input.context = e.context;
        this.queuedInputs.set(e.inputId, input);
        return true;
      }
      case "input_dropped":
        for (const id of e.inputIds) this.queuedInputs.delete(id);
        return true;
      case "todos_updated":
        this.todos = e.todos;
        return true;
      case "context_updated":
        this.context = e.context;
        return true;
      case "model_retry":
      case "diagnostics_reported":
        return true;
      default:
        return false;
    }
  }

  /** The view in the daemon's snapshot shape (as `session/read` returns it). */
  snapshot(): SessionSnapshot {
    const snapshot: SessionSnapshot = { session: this.info, epoch: this.epoch, seq: this.seq };
    if (this.turns.length > 0) snapshot.turns = this.turns.map((t) => t.snapshot());
    if (this.pendingApprovals.size > 0) snapshot.pendingApprovals = [...this.pendingApprovals.values()];
    if (this.queuedInputs.size > 0) snapshot.queuedInputs = [...this.queuedInputs.values()];
    if (this.todos.length > 0) snapshot.todos = this.todos;
    if (Object.keys(this.context).length > 0) snapshot.context = this.context;
    return snapshot;
  }

  #addTurn(turn: TurnView): void {
    this.turns.push(turn);
    this.#turnsById.set(turn.id, turn);
  }
}

function withDelta(item: AnyItem, delta: string): AnyItem {
  switch (item.type) {
    case "agent_message":
    case "reasoning":
      return { ...item, text: (item.text ?? "") + delta };
    case "tool_call":
      return { ...item, output: (item.output ?? "") + delta };
    default:
      return item;
  }
}

function stateAfter(status: TurnStatus | undefined): SessionInfo["state"] {
  switch (status) {
    case "failed":
    case "cancelled":
    case "interrupted":
    case "paused":
      return status;
    default:
      return "idle";
  }
}
