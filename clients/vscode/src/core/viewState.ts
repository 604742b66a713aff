// What the webview shows, derived from the library's `SessionView`: plain JSON, posted to
// the webview whole on every change (the webview renders it and keeps nothing else).
//
// Rules:
// - A tool call that a pending approval gates shows as `awaiting_approval`.
// - Text still streaming (an open item of the running turn) is marked `streaming`; a
//   superseded message (its model call broke off and was retried) is left out.
// - A command that exited non-zero is a completed call the person sees as failed (`failed`).
// - `canUndo`: no turn runs and some ended turn changed files.
// - A turn's error is left out when an error notice of the turn already says it (the daemon
//   reports a failed model call both ways).

import type { AnyItem, ApprovalRequest, ImageRef, SessionView, ToolCall, ToolProgress, TurnView } from "tether-client/browser";

export type Connection = "connecting" | "connected" | "reconnecting" | "closed";

export const PERMISSION_MODES = ["ask", "edits", "auto"] as const;
export type PermissionMode = (typeof PERMISSION_MODES)[number];

/** What the model and mode pickers show. */
export interface SettingsState {
  /** The models the daemon offers (empty until it has said). */
  models: string[];
  /** The daemon's own model (what "" means). */
  defaultModel: string;
  /** The shown session's model, else the one the next session gets; "": the daemon's. */
  model: string;
  /** The shown session's mode, else the one the next session gets; "": the user's configured one. */
  permissionMode: string;
}

export interface ViewState {
  connection: Connection;
  session: {
    id: string;
    title: string;
    state: string;
    model: string;
    permissionMode: string;
    /** The branch of the git worktree the session works in; null: it works in the workspace itself. */
    worktreeBranch: string | null;
  } | null;
  turns: TurnState[];
  approvals: ApprovalState[];
  todos: Array<{ content: string; status: string }>;
  queued: Array<{ inputId: string; text: string }>;
  /** Queued messages a turn ended without taking (it was cancelled or failed), after that turn. */
  dropped: DroppedInput[];
  /** Used and budget in tokens; `percent` of the budget, null when the budget is unknown. */
  context: { used: number; budget: number; percent: number | null } | null;
  runningTurnId: string | null;
  canUndo: boolean;
  /** The last thing that went wrong, in words (a failed call, a refused answer). */
  error: string | null;
  settings: SettingsState;
}

export interface DroppedInput {
  inputId: string;
  text: string;
  /** The daemon's words for why. */
  reason: string;
  /** The turn that ended without it. */
  turnId: string | null;
}

export interface TurnState {
  id: string;
  status: string;
  items: ItemState[];
  error: string | null;
}

export type ItemState =
  | { kind: "user"; id: string; text: string; images?: string[] }
  | { kind: "agent"; id: string; text: string; streaming: boolean }
  | { kind: "reasoning"; id: string; text: string; streaming: boolean }
  | {
      kind: "tool";
      id: string;
      tool: string;
      title: string;
      status: "running" | "awaiting_approval" | "completed" | "failed" | "cancelled";
      output: string;
      exitCode: number | null;
      hasDiff: boolean;
      durationSeconds: number;
      /** How far the running call has got, as its tool last reported ("3/10 indexing"). */
      progress: string;
    }
  | { kind: "notice"; id: string; level: string; message: string }
  | {
      kind: "summary";
      id: string;
      stopReason: string;
      durationSeconds: number;
      files: Array<{ path: string; added: number; removed: number }>;
    }
  | { kind: "compaction"; id: string; step: string; tokensBefore: number; tokensAfter: number };

export interface ApprovalState {
  id: string;
  itemId: string;
  tool: string;
  kind: string;
  reason: string;
  /** What would run or change: the command, else the path. */
  subject: string;
  preview: string;
  alwaysRule: string;
}

/** Output shown per tool call: the tail, since that is where a command says what went wrong. */
export const OUTPUT_SHOWN = 20_000;

export function emptyState(connection: Connection = "connecting"): ViewState {
  return {
    connection,
    session: null,
    turns: [],
    approvals: [],
    todos: [],
    queued: [],
    dropped: [],
    context: null,
    runningTurnId: null,
    canUndo: false,
    error: null,
    settings: { models: [], defaultModel: "", model: "", permissionMode: "" },
  };
}

/** The webview's state for `view` (null: no session attached). */
export function deriveViewState(
  view: SessionView | null,
  connection: Connection,
  error: string | null = null,
  dropped: readonly DroppedInput[] = [],
): ViewState {
  const state = emptyState(connection);
  state.error = error;
  if (view === null) return state;
  state.dropped = [...dropped];
  const info = view.info;
  state.session = {
    id: info.id,
    title: info.title ?? "",
    state: info.state ?? "idle",
    model: info.model ?? "",
    permissionMode: info.permissionMode ?? "edits",
    worktreeBranch: info.worktree?.branch ?? null,
  };
  const gated = new Set([...view.pendingApprovals.values()].map((a) => a.itemId));
  state.turns = view.turns.map((turn) => turnState(turn, gated));
  state.approvals = [...view.pendingApprovals.values()].map(approvalState);
  state.todos = view.todos.map((t) => ({ content: t.content, status: t.status ?? "pending" }));
  state.queued = [...view.queuedInputs.values()].map((q) => ({ inputId: q.inputId, text: q.text }));
  const used = view.context.used ?? 0;
  const budget = view.context.budget ?? 0;
  if (used > 0 || budget > 0) {
    state.context = { used, budget, percent: budget > 0 ? Math.min(100, Math.round((used / budget) * 100)) : null };
  }
  const running = view.runningTurn;
  state.runningTurnId = running?.id ?? null;
  state.canUndo = running === undefined && view.turns.some((t) => changedFiles(t));
  return state;
}

function changedFiles(turn: TurnView): boolean {
  for (const item of turn.items.values()) {
    if (item.type === "turn_summary" && (item.filesChanged?.length ?? 0) > 0) return true;
  }
  return false;
}

function sizeText(size: number): string {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${Math.round(size / 1024)} KB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MB`;
}

/** One line for an image sent with a message: `[image shot.png 1280×720, 210 KB]`. */
export function describeImage(image: ImageRef): string {
  let line = `[image ${image.name} ${image.width}×${image.height}, ${sizeText(image.size)}`;
  if (image.originalSize) {
    line += `, downscaled from ${image.originalWidth ?? 0}×${image.originalHeight ?? 0} ${sizeText(image.originalSize)}`;
  }
  return `${line}]`;
}

function turnState(turn: TurnView, gated: Set<string>): TurnState {
  const items: ItemState[] = [];
  for (const item of turn.items.values()) {
    const shown = itemState(item, turn.status === "running" && turn.open.has(item.id), gated, turn.progress.get(item.id));
    if (shown !== null) items.push(shown);
  }
  let error = turn.error ? turn.error.message || turn.error.code : null;
  if (items.some((i) => i.kind === "notice" && i.level === "error" && i.message === error)) error = null;
  return { id: turn.id, status: turn.status, items, error };
}

function itemState(item: AnyItem, open: boolean, gated: Set<string>, progress?: ToolProgress): ItemState | null {
  switch (item.type) {
    case "user_message":
      return { kind: "user", id: item.id, text: item.text, images: (item.images ?? []).map(describeImage) };
    case "agent_message":
      if (item.superseded) return null;
      return { kind: "agent", id: item.id, text: item.text ?? "", streaming: open };
    case "reasoning":
      if (item.superseded) return null;
      return { kind: "reasoning", id: item.id, text: item.text ?? "", streaming: open };
    case "tool_call":
      return toolState(item, gated.has(item.id), progress);
    case "notice":
      return { kind: "notice", id: item.id, level: item.level ?? "info", message: item.message };
    case "turn_summary":
      return {
        kind: "summary",
        id: item.id,
        stopReason: item.stopReason,
        durationSeconds: item.durationSeconds,
        files: (item.filesChanged ?? []).map((f) => ({ path: f.path, added: f.added ?? 0, removed: f.removed ?? 0 })),
      };
    case "compaction":
      return { kind: "compaction", id: item.id, step: item.step, tokensBefore: item.tokensBefore, tokensAfter: item.tokensAfter };
    default:
      return null;
  }
}

/** A tool's progress report on one line: `3/10 indexing`, `7` without a total. */
export function progressText(report: ToolProgress): string {
  const done = report.total ? `${report.progress}/${report.total}` : `${report.progress}`;
  return report.message ? `${done} ${report.message.slice(0, 80)}` : done;
}

function toolState(item: ToolCall, awaiting: boolean, progress?: ToolProgress): ItemState {
  const exitCode = item.exitCode ?? null;
  let status: "running" | "awaiting_approval" | "completed" | "failed" | "cancelled" = item.status ?? "running";
  if (status === "running" && awaiting) status = "awaiting_approval";
  if (status === "completed" && exitCode !== null && exitCode !== 0) status = "failed";
  const output = item.output ?? "";
  return {
    kind: "tool",
    id: item.id,
    tool: item.tool,
    title: toolTitle(item.tool, item.arguments),
    status,
    output: output.length > OUTPUT_SHOWN ? output.slice(-OUTPUT_SHOWN) : output,
    exitCode,
    hasDiff: (item.diff ?? "") !== "",
    durationSeconds: item.durationSeconds ?? 0,
    progress: status === "running" && progress !== undefined ? progressText(progress) : "",
  };
}

/** A tool call in one line: its command, path or pattern, else its raw arguments, shortened. */
export function toolTitle(tool: string, args: string): string {
  let parsed: unknown = null;
  try {
    parsed = JSON.parse(args);
  } catch {
    // the model's JSON may be invalid: the call then fails, and its raw text is what there is
  }
  const fields = parsed !== null && typeof parsed === "object" ? (parsed as Record<string, unknown>) : {};
  for (const key of ["command", "path", "pattern", "query", "description"]) {
    const value = fields[key];
    if (typeof value === "string" && value !== "") return `${tool} ${shorten(value)}`;
  }
  return `${tool} ${shorten(args)}`.trimEnd();
}

function shorten(text: string, limit = 120): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}

function approvalState(a: ApprovalRequest): ApprovalState {
  return {
    id: a.id,
    itemId: a.itemId,
    tool: a.tool,
    kind: a.kind,
    reason: a.reason,
    subject: a.command || a.path || shorten(a.arguments, 400),
    preview: a.preview ?? "",
    alwaysRule: a.alwaysRule ?? "",
  };
}

/** The status bar's text and tooltip for `state`. */
export function statusBar(state: ViewState): { text: string; tooltip: string } {
  const parts: string[] = [];
  let text: string;
  switch (state.connection) {
    case "connecting":
      text = "$(loading~spin) tether";
      parts.push("Connecting to the daemon");
      break;
    case "reconnecting":
      text = "$(debug-disconnect) tether";
      parts.push("The daemon connection dropped; reconnecting");
      break;
    case "closed":
      text = "$(error) tether";
      parts.push("Not connected to the daemon");
      break;
    default:
      text = state.runningTurnId ? "$(sync~spin) tether" : "$(hubot) tether";
      parts.push("Connected to the daemon");
  }
  if (state.session) parts.push(`Session: ${state.session.title || state.session.id}`);
  if (state.runningTurnId) parts.push("A turn is running");
  if (state.approvals.length > 0) {
    text += ` $(bell-dot) ${state.approvals.length}`;
    parts.push(`${state.approvals.length} approval${state.approvals.length === 1 ? "" : "s"} waiting`);
  }
  return { text, tooltip: parts.join("\n") };
}
