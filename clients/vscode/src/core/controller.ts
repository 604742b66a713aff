// The view's behaviour, without VS Code: one client of the workspace's daemon, the session
// the view shows, and what each command and webview message does to them. The `Host` is
// everything the embedder provides (the webview, the editors, dialogs, the files): extension.ts
// implements it for VS Code, the browser page (src/web/) for `tether web`, tests with plain
// objects. Nothing here needs Node, so the browser runs this same controller in the page.
//
// Rules:
// - One session is shown at a time; showing another detaches the previous one (the daemon
//   keeps it, and its turn runs on).
// - State goes to the webview whole, at most once per `POST_INTERVAL_MS` while text
//   streams (the last state is always posted).
// - A failure of a call is shown (`state.error`, and a notification) and changes nothing
//   else; a message from the webview that is not one is ignored.
// - A queued message that its turn ended without is shown as not sent (whoever sent it);
//   one this view sent goes back into the prompt box, as does a prompt that failed to send.
// - The model and mode pickers change the shown session (`session/configure`) and are kept
//   for the next session this view creates; with no session shown, they apply to that next one.
// - The shown session is remembered (`Host.memory`, the workspace's state in VS Code): after a
//   reload of the window the view shows it again; one that is gone is forgotten quietly.

import type { AnyEvent, AttachedSession, EditorContext, SessionUndoResult, TetherClient, WorkspaceTrustResult } from "tether-client/browser";

import { answerApproval, type AnswerOutcome, type ApprovalChoice } from "./approvals.js";
import { diffDocuments, parseUnifiedDiff, proposedDocuments, type DiffDocuments } from "./diff.js";
import { parseFromWebview, type ToWebview } from "./messages.js";
import { pickerEntries, type PickerEntry } from "./picker.js";
import { explainConnectFailure } from "./settings.js";
import { deriveViewState, type Connection, type DroppedInput, type PermissionMode, type ViewState } from "./viewState.js";

export const POST_INTERVAL_MS = 30;

export interface Host {
  /** Post to the webview (dropped when no webview is open). */
  post(message: ToWebview): void;
  /** The editor's state now, for a turn that carries it. */
  editorContext(): EditorContext | null;
  /**
   * Show `documents` in the diff editor, their path relative to `root` (as for `readFile`);
   * `pending`: the edit waits for this approval, to be answered there.
   */
  openDiff(documents: DiffDocuments, title: string, root: string, pending?: { approvalId: string }): Promise<void>;
  notify(level: "info" | "warning" | "error", message: string): void;
  /** Ask before something that cannot be taken back; resolves true to go on. */
  confirm(message: string, action: string): Promise<boolean>;
  /** Let the person choose a session; resolves with its id, or null for none. */
  pickSession(entries: PickerEntry[]): Promise<string | null>;
  /**
   * The text of the file at `relativePath` (relative to `root`, the folder the shown session
   * works in: the workspace, or the session's git worktree), or null when it cannot be read.
   */
  readFile(relativePath: string, root: string): Promise<string | null>;
  /** Show the file at `path` (relative to `root`, as for `readFile`) at 1-based `line`. */
  openLocation(path: string, line: number, root: string): Promise<void>;
  /** Put `text` on the clipboard. */
  copy(text: string): Promise<void>;
  /** Insert `text` at the active editor's cursor (replacing its selection); false when no editor is active. */
  insertAtCursor(text: string): Promise<boolean>;
  /** The state changed (the status bar follows it). */
  changed?(state: ViewState): void;
  /** Where the shown session's id is kept across reloads of the window. */
  memory?: SessionMemory;
}

export interface SessionMemory {
  get(): string | undefined;
  set(sessionId: string | undefined): void;
}

export class SessionController {
  #client: TetherClient | null = null;
  #session: AttachedSession | null = null;
  #offSession: Array<() => void> = [];
  #connection: Connection = "connecting";
  #error: string | null = null;
  /** Texts of the shown session's queued messages, kept past the event that drops them. */
  #queuedTexts = new Map<string, string>();
  /** Queued messages this view sent. */
  #sentQueued = new Set<string>();
  #dropped: DroppedInput[] = [];
  #timer: ReturnType<typeof setTimeout> | null = null;
  #disposed = false;
  #restoring: Promise<void> | null = null;
  /** The session `newSession` is creating, until it is shown. */
  #creating: Promise<AttachedSession> | null = null;
  #models: { ids: string[]; current: string } | null = null;
  /** The model and mode chosen in the pickers, for sessions this view creates. */
  #chosen: { model?: string; permissionMode?: PermissionMode } = {};

  constructor(
    readonly workspace: string,
    readonly host: Host,
    readonly connect: () => Promise<TetherClient>,
  ) {}

  /** What the webview shows now. */
  get state(): ViewState {
    const state = deriveViewState(this.#session?.view ?? null, this.#connection, this.#error, this.#dropped);
    state.settings = {
      models: this.#models?.ids ?? [],
      defaultModel: this.#models?.current ?? "",
      model: state.session ? state.session.model : (this.#chosen.model ?? ""),
      permissionMode: state.session ? state.session.permissionMode : (this.#chosen.permissionMode ?? ""),
    };
    return state;
  }

  get session(): AttachedSession | null {
    return this.#session;
  }

  /**
   * The folder the shown session works in, which the paths in its tools' answers and diffs are
   * relative to: its git worktree, else the workspace.
   */
  get root(): string {
    return this.#session?.view.info.worktree?.root ?? this.workspace;
  }

  /** Connect (once; later calls return the same client). Rejects when no daemon can be reached. */
  async client(): Promise<TetherClient> {
    if (this.#client !== null && !this.#client.closed) return this.#client;
    this.#setConnection("connecting");
    let client: TetherClient;
    try {
      client = await this.connect();
    } catch (err) {
      this.#setConnection("closed");
      throw explainConnectFailure(err);
    }
    this.#client = client;
    void this.#loadModels(client);
    client.on("connected", () => this.#setConnection("connected"));
    client.on("disconnected", () => this.#setConnection("reconnecting"));
    client.on("closed", () => this.#setConnection("closed"));
    this.#setConnection("connected");
    return client;
  }

  /**
   * Ask the daemon something small; when no answer comes within `ms`, drop the connection
   * and make a new one (the shown session catches up from its cursor). For a page that wakes
   * from a device's sleep or sees the network come back: its socket may be dead without
   * knowing it. Does nothing unless connected.
   */
  async checkConnection(ms = 5000): Promise<void> {
    const client = this.#client;
    if (client === null || client.closed || this.#connection !== "connected") return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
    const answered = client.call("daemon/status", {}).then(
      () => true,
      () => true, // a dropped connection is being made again already
    );
    const alive = await Promise.race([answered, late]);
    clearTimeout(timer);
    if (!alive && this.#client === client) client.reconnect();
  }

  /**
   * Connect, and show the session shown last (before a reload of the window), if it still
   * exists. Once per controller; later calls wait for the first. Rejects when no daemon can
   * be reached.
   */
  restore(): Promise<void> {
    this.#restoring ??= this.#restore().catch((err: unknown) => {
      this.#restoring = null; // the next try connects again
      throw err;
    });
    return this.#restoring;
  }

  async #restore(): Promise<void> {
    const client = await this.client();
    const remembered = this.host.memory?.get();
    if (remembered === undefined || this.#session !== null) return;
    const { sessions } = await client.call("session/list", {});
    if (!sessions.some((s) => s.id === remembered)) {
      this.host.memory?.set(undefined);
      return;
    }
    if (this.#session === null) await this.attach(remembered);
  }

  /** Start a session and show it; `worktree`: in a git worktree of its own (`isolation: "worktree"`). */
  newSession(options: { worktree?: boolean } = {}): Promise<AttachedSession> {
    const creating = this.#createSession(options).finally(() => {
      if (this.#creating === creating) this.#creating = null;
    });
    this.#creating = creating;
    return creating;
  }

  async #createSession(options: { worktree?: boolean }): Promise<AttachedSession> {
    const client = await this.client();
    const params = options.worktree ? { ...this.#chosen, isolation: "worktree" as const } : { ...this.#chosen };
    const { session } = await client.call("session/create", params);
    return this.attach(session.id);
  }

  /** Fork the shown session (its completed turns) and show the fork; null when no session is shown. */
  async fork(): Promise<AttachedSession | null> {
    const session = this.#session;
    if (session === null) return null;
    const client = await this.client();
    const { session: forked, note } = await client.forkSession(session.id);
    if (note) this.host.notify("info", note);
    return this.attach(forked.id);
  }

  /** Change the shown session's model or permission mode (the next session's when none is shown). */
  async configure(change: { model?: string; permissionMode?: PermissionMode }): Promise<void> {
    this.#chosen = { ...this.#chosen, ...change };
    const session = this.#session;
    if (session === null) {
      this.#schedule();
      return;
    }
    const client = await this.client();
    await client.call("session/configure", { sessionId: session.id, ...change });
  }

  async #loadModels(client: TetherClient): Promise<void> {
    try {
      const { models, current } = await client.call("models/list", {});
      this.#models = { ids: models.map((m) => m.id), current };
      this.#schedule();
    } catch {
      // The pickers then offer the daemon's model only; the connection's state says the rest.
    }
  }

  /** Show session `sessionId`, joining a running turn where it is (its text so far, then live). */
  async attach(sessionId: string): Promise<AttachedSession> {
    const client = await this.client();
    if (this.#session?.id === sessionId) return this.#session;
    const session = await client.attach(sessionId);
    const previous = this.#session;
    this.#show(session);
    if (previous !== null) void previous.detach().catch(() => {}); // the daemon keeps it either way
    return session;
  }

  /** The picker's entries for the workspace's sessions. */
  async sessions(): Promise<PickerEntry[]> {
    const client = await this.client();
    const { sessions } = await client.call("session/list", {});
    return pickerEntries(sessions, { attachedId: this.#session?.id ?? null, now: Date.now() / 1000 });
  }

  /** Let the person pick a session, and show it. */
  async pick(): Promise<void> {
    const chosen = await this.host.pickSession(await this.sessions());
    if (chosen !== null) await this.attach(chosen);
  }

  /** Send `text` to the shown session (a new one when none is shown), with the editor's state when asked. */
  async send(text: string, options: { withEditor?: boolean } = {}): Promise<void> {
    if (text.trim() === "") return;
    // A session being created (New pressed a moment ago) is the one the text goes to.
    const session = this.#session ?? (await (this.#creating ?? this.newSession()));
    const editor = options.withEditor ? this.host.editorContext() : null;
    const result = await session.startTurn(text, editor ? { editor } : {});
    if (result.queued && result.inputId) this.#sentQueued.add(result.inputId);
    for (const problem of result.problems ?? []) this.host.notify("warning", problem);
  }

  async cancel(): Promise<void> {
    const session = this.#session;
    if (session === null || session.view.runningTurn === undefined) return;
    await session.cancel();
  }

  /** Undo the last turn that changed files, asking first when files changed since. */
  async undo(): Promise<SessionUndoResult | null> {
    const session = this.#session;
    if (session === null) return null;
    const client = await this.client();
    let result = await client.call("session/undo", { sessionId: session.id });
    if (!result.applied && (result.conflicts?.length ?? 0) > 0) {
      const files = result.conflicts!.join(", ");
      if (!(await this.host.confirm(`These files changed since the turn: ${files}. Undo anyway?`, "Undo anyway"))) {
        return result;
      }
      result = await client.call("session/undo", { sessionId: session.id, turnId: result.turnId, force: true });
    }
    const changed = [...(result.restored ?? []), ...(result.removed ?? [])];
    this.host.notify("info", changed.length > 0 ? `Undone: ${changed.join(", ")}` : result.note || "Nothing to undo.");
    if (result.note && changed.length > 0) this.host.notify("info", result.note);
    return result;
  }

  async answer(approvalId: string, choice: ApprovalChoice): Promise<AnswerOutcome> {
    const session = this.#session;
    if (session === null) return { answered: false, reason: "no session is shown" };
    const outcome = await answerApproval(session, approvalId, choice);
    if (!outcome.answered) this.host.notify("info", `Approval not sent: ${outcome.reason}.`);
    return outcome;
  }

  /** The diff editor's documents for tool call `itemId` of the shown session. */
  async diffFor(itemId: string): Promise<DiffDocuments> {
    const session = this.#session;
    for (const turn of session?.view.turns ?? []) {
      const item = turn.items.get(itemId);
      if (item?.type !== "tool_call") continue;
      if (!item.diff) throw new Error(`${item.tool} changed no file`);
      const parsedPath = diffDocuments(item.diff, null).path;
      const current = await this.host.readFile(parsedPath, this.root).catch(() => null);
      return diffDocuments(item.diff, current);
    }
    throw new Error(`no tool call ${itemId} in the shown session`);
  }

  async openDiff(itemId: string): Promise<void> {
    const documents = await this.diffFor(itemId);
    await this.host.openDiff(documents, `${documents.path} (tether${documents.whole ? "" : ": changed lines"})`, this.root);
  }

  /** The diff editor's documents for the edit that pending approval `approvalId` of the shown session would make. */
  async proposedDiffFor(approvalId: string): Promise<DiffDocuments> {
    const approval = this.#session?.view.pendingApprovals.get(approvalId);
    if (approval === undefined) throw new Error("that approval is no longer pending");
    if (approval.kind !== "edit" || !approval.preview) throw new Error(`${approval.tool} proposes no edit to show`);
    const file = approval.path || parseUnifiedDiff(approval.preview).path;
    const current = await this.host.readFile(file, this.root).catch(() => null);
    return proposedDocuments(approval.preview, current);
  }

  async openProposedDiff(approvalId: string): Promise<void> {
    const documents = await this.proposedDiffFor(approvalId);
    await this.host.openDiff(documents, `${documents.path} (tether: proposed edit${documents.whole ? "" : ", changed lines"})`, this.root, {
      approvalId,
    });
  }

  /** Trust the workspace, or withdraw the trust, once the person confirms; the state after. */
  async toggleTrust(): Promise<WorkspaceTrustResult> {
    const client = await this.client();
    const now = await client.call("workspace/trust", {});
    const [question, action] = now.trusted
      ? [
          "This workspace is trusted: its language servers may run its own TypeScript and Python environment. Withdraw the trust?",
          "Withdraw trust",
        ]
      : [
          "Trust this workspace? Its language servers may then run the workspace's own programs (node_modules/typescript, .venv/bin/python); until then they run restricted.",
          "Trust",
        ];
    if (!(await this.host.confirm(question, action))) return now;
    const after = await client.call("workspace/trust", { trusted: !now.trusted });
    this.host.notify("info", after.trusted ? "tether: the workspace is trusted" : "tether: the workspace is no longer trusted");
    return after;
  }

  /** Where the daemon writes its log. */
  async daemonLog(): Promise<string> {
    const client = await this.client();
    const status = await client.call("daemon/status", {});
    if (!status.logFile) throw new Error("the daemon did not say where its log is");
    return status.logFile;
  }

  /** Act on a message from the webview; failures are shown, never thrown. */
  async handle(raw: unknown): Promise<void> {
    const message = parseFromWebview(raw);
    if (message === null) return;
    try {
      switch (message.type) {
        case "ready":
          if (this.#session === null) await this.restore();
          this.#post();
          return;
        case "send":
          try {
            await this.send(message.text, { withEditor: message.withEditor ?? false });
          } catch (err) {
            this.host.post({ type: "restorePrompt", text: message.text });
            throw err;
          }
          return;
        case "approve":
          await this.answer(message.approvalId, message.choice);
          return;
        case "cancel":
          await this.cancel();
          return;
        case "undo":
          await this.undo();
          return;
        case "openDiff":
          await this.openDiff(message.itemId);
          return;
        case "openProposedDiff":
          await this.openProposedDiff(message.approvalId);
          return;
        case "newSession":
          await this.newSession({ worktree: message.worktree ?? false });
          return;
        case "fork":
          await this.fork();
          return;
        case "openLocation":
          await this.host.openLocation(message.path, message.line, this.root);
          return;
        case "pickSession":
          await this.pick();
          return;
        case "configure":
          await this.configure(message.model !== undefined ? { model: message.model } : { permissionMode: message.permissionMode! });
          return;
        case "copyCode":
          await this.host.copy(message.text);
          return;
        case "insertCode":
          if (!(await this.host.insertAtCursor(message.text))) this.host.notify("info", "Open a file to insert the code into.");
          return;
      }
    } catch (err) {
      this.fail(err);
    }
  }

  /** Show a failure: in the view and as a notification. */
  fail(err: unknown): void {
    this.#error = err instanceof Error ? err.message : String(err);
    this.host.notify("error", this.#error);
    this.#schedule();
  }

  dispose(): void {
    this.#disposed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    for (const off of this.#offSession) off();
    this.#client?.close();
  }

  #show(session: AttachedSession): void {
    for (const off of this.#offSession) off();
    this.#session = session;
    this.host.memory?.set(session.id);
    this.#error = null;
    this.#dropped = [];
    this.#sentQueued.clear();
    this.#queuedTexts = new Map([...session.view.queuedInputs.values()].map((q) => [q.inputId, q.text]));
    this.#offSession = [
      session.on("event", ({ event }, known) => known && this.#onEvent(session, event as AnyEvent)),
      session.on("change", () => this.#schedule()),
      session.on("ended", () => {
        if (this.#session === session) {
          this.#session = null;
          this.#schedule();
        }
      }),
    ];
    this.#post();
  }

  #onEvent(session: AttachedSession, event: AnyEvent): void {
    if (event.type === "input_queued") {
      this.#queuedTexts.set(event.inputId, event.text);
      return;
    }
    if (event.type !== "input_dropped") return;
    // Folded in already: the turn that drops them is the one still running.
    const turnId = session.view.runningTurn?.id ?? session.view.turns.at(-1)?.id ?? null;
    const reason = event.reason;
    for (const inputId of event.inputIds) {
      const text = this.#queuedTexts.get(inputId) ?? "";
      this.#queuedTexts.delete(inputId);
      this.#dropped.push({ inputId, text, reason, turnId });
      if (this.#sentQueued.delete(inputId) && text !== "") this.host.post({ type: "restorePrompt", text });
    }
  }

  #setConnection(connection: Connection): void {
    if (this.#connection === connection) return;
    this.#connection = connection;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#timer !== null || this.#disposed) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#post();
    }, POST_INTERVAL_MS);
  }

  #post(): void {
    if (this.#disposed) return;
    if (this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    const state = this.state;
    this.host.post({ type: "state", state });
    this.host.changed?.(state);
  }
}
