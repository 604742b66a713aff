// JSON-RPC 2.0 over one socket: typed calls, notifications in arrival order, one close.
//
// Frames are handled in the order they arrive, and listeners run synchronously as each is
// read, so a caller that tracks state from notifications sees them in the daemon's order.
// A call's promise settles later (a microtask), so whoever must relate a response to the
// notifications around it holds them until the response is seen (as `TetherClient` does
// for `session/attach`).

import { ConnectionError, RpcError } from "./errors.js";
import { Emitter } from "./emitter.js";
import type { MethodName, ParamsOf, ResultOf } from "./protocol.js";
import type { Connector, Socket, SocketHandlers } from "./transport.js";

interface Pending {
  method: string;
  resolve(result: unknown): void;
  reject(error: Error): void;
}

export interface ConnectionEvents {
  /** A notification (a message with a method and no id). */
  notification: [method: string, params: unknown];
  /** A frame that is not a JSON-RPC message this library understands; it is skipped. */
  warning: [error: Error];
  /** The socket ended; every pending call has been rejected with a `ConnectionError`. */
  closed: [info: { code: number; reason: string }];
}

export class Connection extends Emitter<ConnectionEvents> {
  #socket: Socket | null = null;
  #pending = new Map<string, Pending>();
  #nextId = 0;
  #closed = false;

  private constructor() {
    super();
  }

  /** Open a socket with `connector` and speak JSON-RPC over it. */
  static async open(connector: Connector): Promise<Connection> {
    const connection = new Connection();
    const handlers: SocketHandlers = {
      message: (text) => connection.#onMessage(text),
      closed: (info) => connection.#onClosed(info),
    };
    connection.#socket = await connector(handlers);
    return connection;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Send a request; resolves with its result. Rejects with an `RpcError` for an error
   * response and a `ConnectionError` when the socket is closed or closes before the answer
   * (the request may or may not have been carried out then).
   */
  call<M extends MethodName>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
  call(method: string, params: unknown): Promise<unknown>;
  call(method: string, params: unknown): Promise<unknown> {
    const socket = this.#socket;
    if (this.#closed || socket === null) {
      return Promise.reject(new ConnectionError("CLOSED", `cannot send ${method}: not connected`));
    }
    const id = String(++this.#nextId);
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { method, resolve, reject });
      try {
        socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: params ?? {} }));
      } catch (err) {
        this.#pending.delete(id);
        reject(new ConnectionError("CLOSED", `cannot send ${method}: ${String(err)}`, { cause: err }));
      }
    });
  }

  /** Close the socket; pending calls are rejected with a `ConnectionError`. */
  close(): void {
    this.#socket?.close();
  }

  #onMessage(text: string): void {
    if (this.#closed) return;
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch (err) {
      this.emit("warning", new Error(`a frame that is not JSON: ${text.slice(0, 200)}`, { cause: err }));
      return;
    }
    if (message === null || typeof message !== "object" || Array.isArray(message)) {
      this.emit("warning", new Error(`a frame that is not a JSON-RPC message: ${text.slice(0, 200)}`));
      return;
    }
    const frame = message as { id?: unknown; method?: unknown; params?: unknown; result?: unknown; error?: unknown };
    if (typeof frame.method === "string" && frame.id === undefined) {
      this.emit("notification", frame.method, frame.params);
      return;
    }
    const pending = typeof frame.id === "string" ? this.#pending.get(frame.id) : undefined;
    if (pending === undefined || !("result" in frame || "error" in frame)) {
      this.emit("warning", new Error(`a frame answering no request: ${text.slice(0, 200)}`));
      return;
    }
    this.#pending.delete(frame.id as string);
    const error = frame.error as { code?: unknown; message?: unknown; data?: unknown } | undefined;
    if (error !== undefined && error !== null) {
      const code = typeof error.code === "number" ? error.code : 0;
      const words = typeof error.message === "string" ? error.message : "error";
      pending.reject(new RpcError(code, words, error.data, pending.method));
    } else {
      pending.resolve(frame.result);
    }
  }

  #onClosed(info: { code: number; reason: string }): void {
    if (this.#closed) return;
    this.#closed = true;
    const why = `connection to the daemon closed (code ${info.code}${info.reason ? `: ${info.reason}` : ""})`;
    for (const pending of this.#pending.values()) {
      pending.reject(new ConnectionError("CLOSED", `${pending.method}: ${why}`));
    }
    this.#pending.clear();
    this.emit("closed", info);
  }
}
