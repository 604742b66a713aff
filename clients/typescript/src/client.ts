// The client: one connection to a daemon, kept up, and the sessions attached through it.
//
// Continuity rules, per attached session:
// - The client holds the cursor (epoch, seq) of the last event it folded in. Within an
//   epoch an event must come with seq = cursor + 1: a lower seq is a duplicate and dropped,
//   a higher one is a gap and the session re-attaches from its cursor; an event of another
//   epoch re-attaches too. Merged deltas (the daemon's for a client that fell behind) stand
//   for the events firstSeq..seq: they must start at cursor + 1, and move the cursor to seq.
// - While an attach is in flight, the session's events are held, then checked against the
//   cursor the answer gives (`replay`: the one sent; `snapshot`: the snapshot's), because the
//   replayed frames arrive right behind the answer, before the call's promise settles.
// - `session/resync` (the client fell behind) and a dropped connection re-attach every
//   session from its cursor, on a new connection when the old one dropped. A replay is
//   invisible to the caller: it sees each event once, in order. A snapshot answer (the
//   daemon restarted, or no longer holds the missed events) replaces the view, and the
//   session emits `reset`.
// - Calls made while the connection is down wait for the next one; calls in flight when it
//   drops are rejected with a `ConnectionError`, since the daemon may or may not have
//   carried them out.

import { Emitter } from "./emitter.js";
import { ConnectionError, RpcError } from "./errors.js";
import { Connection } from "./connection.js";
import {
  ErrorCode,
  PROTOCOL_VERSION,
  type ApprovalRequest,
  type ApprovalRespondParams,
  type DaemonEventParams,
  type EventRecord,
  type FileReadParams,
  type FileReadResult,
  type InitializeResult,
  type MethodName,
  type ParamsOf,
  type ProviderEnvironment,
  type ResultOf,
  type SearchHit,
  type SessionAttachResult,
  type SessionDeletedParams,
  type SessionEventParams,
  type SessionForkParams,
  type SessionForkResult,
  type SessionInfo,
  type SessionSearchParams,
  type TurnStartParams,
  type TurnStartResult,
} from "./protocol.js";
import type { Connector } from "./transport.js";
import { SessionView, type TurnView } from "./view.js";

export const CLIENT_VERSION = "0.1.0";

export interface ClientOptions {
  /** Opens a socket to the daemon; called again for every reconnection. */
  connector: Connector;
  /** Sent with `initialize`; the daemon names answers (`approval_resolved.by`) with it. */
  clientName?: string;
  clientVersion?: string;
  /** Provider variables for this connection's turns (see `InitializeParams.providerEnv`). */
  providerEnv?: ProviderEnvironment;
  /** Reconnect after a dropped connection (default true). */
  reconnect?: boolean;
  /** Milliseconds between reconnection attempts, the last repeated (default 50 … 2000). */
  reconnectDelays?: number[];
  /** Give up reconnecting after this many milliseconds (default 30000). */
  reconnectTimeout?: number;
}

export interface ClientEvents {
  /** A connection was made and initialized (the first, or one after a drop). */
  connected: [info: InitializeResult];
  /** The connection dropped; the client is reconnecting. */
  disconnected: [info: { code: number; reason: string }];
  /** The client is closed for good: `close()` was called, or reconnecting gave up. */
  closed: [error: Error | null];
  "daemon/event": [params: DaemonEventParams];
  /** Every notification, those handled by the client included. */
  notification: [method: string, params: unknown];
  /** Something the client could not understand or recover from on its own, and skipped. */
  warning: [error: Error];
}

const DEFAULT_DELAYS = [50, 100, 250, 500, 1000, 2000];

export class TetherClient extends Emitter<ClientEvents> {
  readonly #options: ClientOptions;
  #connection: Connection | null = null;
  /** Settles when a connection is up (or the client is closed). */
  #ready: Promise<Connection>;
  #setReady: (c: Connection) => void = () => {};
  #failReady: (e: Error) => void = () => {};
  #closed = false;
  #sessions = new Map<string, AttachedSession>();
  /** The daemon's answer to the latest `initialize`. */
  serverInfo: InitializeResult | null = null;
  /** Connections made, the first included. */
  connections = 0;

  private constructor(options: ClientOptions) {
    super();
    this.#options = options;
    this.#ready = this.#newReady();
  }

  /** Connect and initialize; rejects when the first connection cannot be made. */
  static async connect(options: ClientOptions): Promise<TetherClient> {
    const client = new TetherClient(options);
    const connection = await client.#open();
    client.#setReady(connection);
    return client;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The sessions attached through this client, by id. */
  get sessions(): ReadonlyMap<string, AttachedSession> {
    return this.#sessions;
  }

  /**
   * Call a method; resolves with its result. Waits for a connection while reconnecting.
   * Rejects with an `RpcError` for an error answer and a `ConnectionError` when the client
   * is closed or the connection drops before the answer.
   */
  async call<M extends MethodName>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    const connection = await this.#ready;
    return connection.call(method, params);
  }

  /**
   * Attach to a session: its view, caught up and kept current, across resyncs and
   * reconnections. Attaching a session already attached returns the same object.
   */
  async attach(sessionId: string, options: { role?: "controller" | "observer" } = {}): Promise<AttachedSession> {
    let session = this.#sessions.get(sessionId);
    if (session === undefined) {
      session = new AttachedSession(this, sessionId, options.role ?? "controller");
      this.#sessions.set(sessionId, session);
      try {
        await session.reattach();
      } catch (err) {
        this.#sessions.delete(sessionId);
        throw err;
      }
    }
    await session.ready;
    return session;
  }

  /** Create a session and attach to it. */
  async createSession(params: ParamsOf<"session/create"> = {}): Promise<AttachedSession> {
    const { session } = await this.call("session/create", params);
    return this.attach(session.id);
  }

  // --- sessions people manage -------------------------------------------------------------

  /**
   * Fork a session: a new session (not attached) with its conversation up to and including
   * `turnId` (default: every completed turn). Files are not copied: `note` says so.
   */
  forkSession(sessionId: string, options: Omit<SessionForkParams, "sessionId"> = {}): Promise<SessionForkResult> {
    return this.call("session/fork", { ...options, sessionId });
  }

  /** Give a session a title (empty: back to the automatic one); resolves with the session. */
  async renameSession(sessionId: string, title: string): Promise<SessionInfo> {
    return (await this.call("session/rename", { sessionId, title })).session;
  }

  /** Search the workspace's prompts and answers; the best hits first. */
  async searchSessions(query: string, options: Omit<SessionSearchParams, "query"> = {}): Promise<SearchHit[]> {
    return (await this.call("session/search", { ...options, query })).hits;
  }

  /**
   * The lines of a text file around a line (`file/read`): relative to `sessionId`'s root when
   * given (its worktree, if it has one), else the workspace's. Refused (INVALID_PARAMS, with
   * the reason) outside the root, through a symlink, for credential-like, binary or large files.
   */
  readFile(path: string, options: Omit<FileReadParams, "path"> = {}): Promise<FileReadResult> {
    return this.call("file/read", { ...options, path });
  }

  /** A session's whole persisted event log, oldest first, read `pageSize` events at a time. */
  async *eventLog(sessionId: string, pageSize = 1000): AsyncGenerator<EventRecord> {
    let afterSeq = 0;
    for (;;) {
      const page = await this.call("session/events", { sessionId, afterSeq, limit: pageSize });
      yield* page.events;
      const last = page.events.at(-1);
      if (!page.more || last === undefined) return;
      afterSeq = last.seq;
    }
  }

  /**
   * Drop the current connection and make a new one, as after any drop (attached sessions
   * catch up from their cursors): for a connection found dead, one that a device's sleep
   * left open but unanswered. Nothing happens while no connection is up.
   */
  reconnect(): void {
    if (!this.#closed) this.#connection?.close();
  }

  /** Close the connection for good; attached sessions end. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const error = new ConnectionError("CLOSED", "the client was closed");
    this.#failReady(error);
    this.#connection?.close();
    for (const session of this.#sessions.values()) session.ended();
    this.#sessions.clear();
    this.emit("closed", null);
  }

  /** @internal report what a session could not recover from on its own. */
  warn(error: unknown): void {
    this.emit("warning", error instanceof Error ? error : new Error(String(error)));
  }

  /** @internal */
  forget(sessionId: string): void {
    this.#sessions.delete(sessionId);
  }

  /** @internal the attach call, made on the current connection; see `AttachedSession`. */
  async attachCall(params: ParamsOf<"session/attach">): Promise<SessionAttachResult> {
    return this.call("session/attach", params);
  }

  #newReady(): Promise<Connection> {
    const ready = new Promise<Connection>((resolve, reject) => {
      this.#setReady = resolve;
      this.#failReady = reject;
    });
    ready.catch(() => {}); // a closed client with nobody waiting is not an error
    return ready;
  }

  async #open(): Promise<Connection> {
    const connection = await Connection.open(this.#options.connector);
    connection.on("notification", (method, params) => this.#onNotification(method, params));
    connection.on("warning", (error) => this.emit("warning", error));
    connection.on("closed", (info) => this.#onClosed(connection, info));
    try {
      const init: ParamsOf<"initialize"> = {
        clientName: this.#options.clientName ?? "tether-typescript",
        clientVersion: this.#options.clientVersion ?? CLIENT_VERSION,
        protocolVersion: PROTOCOL_VERSION,
      };
      if (this.#options.providerEnv) init.providerEnv = this.#options.providerEnv;
      this.serverInfo = await connection.call("initialize", init);
    } catch (err) {
      connection.close();
      throw err;
    }
    this.#connection = connection;
    this.connections += 1;
    this.emit("connected", this.serverInfo);
    return connection;
  }

  #onNotification(method: string, params: unknown): void {
    this.emit("notification", method, params);
    const sessionId = (params as { sessionId?: unknown } | null)?.sessionId;
    const session = typeof sessionId === "string" ? this.#sessions.get(sessionId) : undefined;
    switch (method) {
      case "session/event":
        session?.receive(params as SessionEventParams);
        break;
      case "session/resync":
        session?.resync();
        break;
      case "session/deleted":
        if (session !== undefined) {
          this.#sessions.delete(session.id);
          session.deleted(params as SessionDeletedParams);
        }
        break;
      case "daemon/event":
        this.emit("daemon/event", params as DaemonEventParams);
        break;
      default:
        break; // a notification of a newer daemon
    }
  }

  #onClosed(connection: Connection, info: { code: number; reason: string }): void {
    if (this.#connection !== connection || this.#closed) return;
    this.#connection = null;
    for (const session of this.#sessions.values()) session.disconnected();
    if (this.#options.reconnect === false) {
      this.#closed = true;
      const error = new ConnectionError("CLOSED", `connection to the daemon closed (code ${info.code})`);
      this.#failReady(error);
      for (const session of this.#sessions.values()) session.ended();
      this.emit("closed", error);
      return;
    }
    this.#ready = this.#newReady();
    this.emit("disconnected", info);
    void this.#reconnect();
  }

  async #reconnect(): Promise<void> {
    const delays = this.#options.reconnectDelays ?? DEFAULT_DELAYS;
    const deadline = Date.now() + (this.#options.reconnectTimeout ?? 30000);
    let lastError: unknown = null;
    for (let attempt = 0; !this.#closed; attempt += 1) {
      if (Date.now() > deadline) {
        const error = new ConnectionError("CLOSED", `could not reconnect to the daemon: ${String(lastError)}`, {
          cause: lastError,
        });
        this.#closed = true;
        this.#failReady(error);
        for (const session of this.#sessions.values()) session.ended();
        this.#sessions.clear();
        this.emit("closed", error);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, delays[Math.min(attempt, delays.length - 1)] ?? 1000));
      if (this.#closed) return;
      try {
        const connection = await this.#open();
        if (this.#closed) {
          connection.close();
          return;
        }
        this.#setReady(connection);
        for (const session of this.#sessions.values()) void session.reattach();
        return;
      } catch (err) {
        lastError = err;
      }
    }
  }
}

export interface SessionStatistics {
  /** Attach calls answered. */
  attaches: number;
  /** Of those, answered with a replay / with a snapshot. */
  replays: number;
  snapshots: number;
  /** `session/resync` notices received. */
  resyncs: number;
  /** Re-attaches after a dropped connection. */
  reconnects: number;
  /** Events dropped as already seen, and gaps that made the session re-attach. */
  duplicates: number;
  gaps: number;
  /** Deltas that came merged into the delta before them (the client was behind). */
  merged: number;
  /** Events of a type this library does not know (counted, otherwise ignored). */
  unknownEvents: number;
}

export interface SessionEvents {
  /** One event, folded in already; each arrives once, in seq order. `known`: of a known type. */
  event: [params: SessionEventParams, known: boolean];
  /** The view changed (after an event, or a reset). */
  change: [view: SessionView];
  /** A snapshot replaced the view: continuity was lost (a daemon restart) and rebuilt. */
  reset: [view: SessionView];
  /**
   * An approval is waiting: told to each listener once, whether it came as an event or in a
   * snapshot. A listener added later (after `attach` resolved, say) is told, in a microtask,
   * of every approval still pending, so one answered nowhere else is never missed.
   */
  approval: [request: ApprovalRequest];
  /** A turn ended. */
  turnCompleted: [turn: TurnView];
  /** The session was deleted; it is no longer attached. */
  deleted: [params: SessionDeletedParams];
  /** No more events will come: detached, deleted, or the client closed. */
  ended: [];
}

/** An attached session: its view, kept current, and the calls that act on it. */
export class AttachedSession extends Emitter<SessionEvents> {
  #view: SessionView | null = null;
  #attaching = false;
  #again = false;
  #held: SessionEventParams[] = [];
  #ended = false;
  #announced = new Set<string>();
  #iterators = new Set<EventQueue>();
  #afterReconnect = false;
  /** Settles once the first attach has been answered. */
  readonly ready: Promise<void>;
  #setReady: () => void = () => {};
  #failReady: (e: Error) => void = () => {};
  readonly stats: SessionStatistics = {
    attaches: 0,
    replays: 0,
    snapshots: 0,
    resyncs: 0,
    reconnects: 0,
    duplicates: 0,
    gaps: 0,
    merged: 0,
    unknownEvents: 0,
  };

  /** @internal use `TetherClient.attach`. */
  constructor(
    readonly client: TetherClient,
    readonly id: string,
    readonly role: "controller" | "observer",
  ) {
    super();
    this.ready = new Promise<void>((resolve, reject) => {
      this.#setReady = resolve;
      this.#failReady = reject;
    });
    this.ready.catch(() => {});
  }

  override on<K extends keyof SessionEvents>(event: K, listener: (...args: SessionEvents[K]) => void): () => void {
    const off = super.on(event, listener);
    if (event === "approval" && this.#view !== null) {
      // Approvals announced before the listener was added (those of the attach's snapshot
      // are, before `attach` resolves): told now, if they still wait and it still listens.
      const earlier = [...this.#view.pendingApprovals.keys()].filter((id) => this.#announced.has(id));
      const tell = listener as (request: ApprovalRequest) => void;
      queueMicrotask(() => {
        for (const id of earlier) {
          const request = this.#view?.pendingApprovals.get(id);
          if (request !== undefined && this.listens(event, listener)) this.tell(tell, request);
        }
      });
    }
    return off;
  }

  /** The session as of the last event folded in. */
  get view(): SessionView {
    if (this.#view === null) throw new Error(`session ${this.id} is not attached yet`);
    return this.#view;
  }

  /** The last event folded in. */
  get cursor(): { epoch: string; seq: number } | null {
    return this.#view && { epoch: this.#view.epoch, seq: this.#view.seq };
  }

  /** Start a turn (or queue the text for the running one). */
  startTurn(text: string, extra: Omit<TurnStartParams, "sessionId" | "text"> = {}): Promise<TurnStartResult> {
    return this.client.call("turn/start", { ...extra, sessionId: this.id, text });
  }

  /** Cancel the running turn (or `turnId`). */
  cancel(turnId?: string): Promise<ResultOf<"turn/cancel">> {
    return this.client.call("turn/cancel", turnId ? { sessionId: this.id, turnId } : { sessionId: this.id });
  }

  /**
   * Answer a pending approval. Rejects with an `RpcError` coded APPROVAL_RESOLVED when
   * someone answered first (its `data` says who and how).
   */
  async respond(
    approvalId: string,
    decision: ApprovalRespondParams["decision"],
    options: { scope?: ApprovalRespondParams["scope"]; message?: string } = {},
  ): Promise<void> {
    await this.client.call("approval/respond", { sessionId: this.id, approvalId, decision, ...options });
  }

  /** Resolves with the turn once it has ended (at once if it has already). */
  waitForTurn(turnId: string): Promise<TurnView> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const turn = this.#view?.turn(turnId);
        if (turn !== undefined && turn.status !== "running") {
          offChange();
          offEnded();
          resolve(turn);
          return true;
        }
        return false;
      };
      const offChange = this.on("change", () => void check());
      const offEnded = this.on("ended", () => {
        offChange();
        offEnded();
        reject(new ConnectionError("CLOSED", `session ${this.id} ended before turn ${turnId} did`));
      });
      if (this.#view !== null) check();
    });
  }

  /**
   * The session's events from now on, each once, in order, as an async iterator; it ends
   * when the session does. Events arriving while the caller is busy are queued for it.
   */
  events(): AsyncIterableIterator<SessionEventParams> {
    const queue = new EventQueue(() => this.#iterators.delete(queue));
    if (this.#ended) queue.end();
    else this.#iterators.add(queue);
    return queue;
  }

  /** Stop receiving the session's events. */
  async detach(): Promise<void> {
    if (this.#ended) return;
    this.client.forget(this.id);
    this.ended();
    await this.client.call("session/detach", { sessionId: this.id });
  }

  // --- driven by the client -------------------------------------------------------------

  /** @internal (re-)attach from the cursor held; coalesces requests made meanwhile. */
  async reattach(): Promise<void> {
    if (this.#attaching) {
      this.#again = true;
      return;
    }
    this.#attaching = true;
    try {
      do {
        this.#again = false;
        const after = this.cursor;
        const params: ParamsOf<"session/attach"> = { sessionId: this.id, role: this.role };
        if (after !== null) params.after = after;
        let result: SessionAttachResult;
        try {
          result = await this.client.attachCall(params);
        } catch (err) {
          if (err instanceof ConnectionError && !this.client.closed) {
            return; // the reconnection attaches again
          }
          if (err instanceof RpcError && err.code === ErrorCode.SESSION_NOT_FOUND && this.#view !== null) {
            this.client.forget(this.id);
            this.ended();
          }
          this.#failReady(err as Error);
          throw err;
        }
        if (this.#ended) return;
        this.#answered(result, after);
      } while (this.#again && !this.#ended);
    } finally {
      this.#attaching = false;
    }
    this.#setReady();
  }

  /** @internal */
  receive(params: SessionEventParams): void {
    if (this.#ended) return;
    if (this.#attaching || this.#view === null) {
      this.#held.push(params);
      return;
    }
    this.#accept(params);
  }

  /** @internal */
  resync(): void {
    this.stats.resyncs += 1;
    void this.reattach().catch((err: unknown) => this.#warn(err));
  }

  /** @internal the connection dropped: hold events until the next attach is answered. */
  disconnected(): void {
    this.#held = [];
    this.#afterReconnect = true;
  }

  /** @internal */
  deleted(params: SessionDeletedParams): void {
    this.emit("deleted", params);
    this.ended();
  }

  /** @internal */
  ended(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#failReady(new ConnectionError("CLOSED", `session ${this.id} ended`));
    for (const queue of this.#iterators) queue.end();
    this.#iterators.clear();
    this.emit("ended");
  }

  #answered(result: SessionAttachResult, after: { epoch: string; seq: number } | null): void {
    this.stats.attaches += 1;
    if (this.#afterReconnect) {
      this.stats.reconnects += 1;
      this.#afterReconnect = false;
    }
    const held = this.#held;
    this.#held = [];
    if (result.mode === "snapshot" && result.snapshot) {
      this.stats.snapshots += 1;
      this.#view = new SessionView(result.snapshot);
      if (after !== null) this.emit("reset", this.#view);
      this.#changed();
    } else if (this.#view === null || after === null || result.epoch !== after.epoch || result.fromSeq > after.seq) {
      // A replay that does not continue what the view holds: start again from a snapshot.
      this.stats.gaps += 1;
      this.#view = null;
      this.#again = true;
      return;
    } else {
      this.stats.replays += 1;
    }
    for (const params of held) {
      if (this.#attaching && this.#again) break;
      this.#accept(params);
    }
  }

  #accept(params: SessionEventParams): void {
    const view = this.#view;
    if (view === null) return;
    if (params.epoch === view.epoch && params.seq <= view.seq) {
      this.stats.duplicates += 1;
      return;
    }
    if (params.epoch !== view.epoch || (params.firstSeq ?? params.seq) !== view.seq + 1) {
      this.stats.gaps += 1;
      void this.reattach().catch((err: unknown) => this.#warn(err));
      return;
    }
    if (params.firstSeq != null) this.stats.merged += params.seq - params.firstSeq;
    const known = view.apply(params);
    if (!known) this.stats.unknownEvents += 1;
    this.emit("event", params, known);
    for (const queue of this.#iterators) queue.push(params);
    const event = params.event as { type: string; turnId?: string };
    if (event.type === "turn_completed" && event.turnId !== undefined) {
      const turn = view.turn(event.turnId);
      if (turn !== undefined) this.emit("turnCompleted", turn);
    }
    this.#changed();
  }

  #changed(): void {
    const view = this.#view;
    if (view === null) return;
    for (const [id, request] of view.pendingApprovals) {
      if (!this.#announced.has(id)) {
        this.#announced.add(id);
        this.emit("approval", request);
      }
    }
    this.emit("change", view);
  }

  #warn(err: unknown): void {
    this.client.warn(err);
  }
}

/** An async iterator fed by pushes, unbounded, ended once. */
class EventQueue implements AsyncIterableIterator<SessionEventParams> {
  #items: SessionEventParams[] = [];
  #waiting: ((r: IteratorResult<SessionEventParams>) => void) | null = null;
  #done = false;

  constructor(readonly onReturn: () => void) {}

  push(item: SessionEventParams): void {
    if (this.#done) return;
    if (this.#waiting) {
      const wake = this.#waiting;
      this.#waiting = null;
      wake({ value: item, done: false });
    } else {
      this.#items.push(item);
    }
  }

  end(): void {
    this.#done = true;
    if (this.#waiting) {
      const wake = this.#waiting;
      this.#waiting = null;
      wake({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<SessionEventParams>> {
    const item = this.#items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.#done) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.#waiting = resolve;
    });
  }

  return(): Promise<IteratorResult<SessionEventParams>> {
    this.end();
    this.#items = [];
    this.onReturn();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<SessionEventParams> {
    return this;
  }
}
