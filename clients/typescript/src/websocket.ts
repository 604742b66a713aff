// A `Connector` on the WebSocket API browsers have (and Node's `ws`, which shares it): for a
// page that speaks the tether protocol over a socket its own server relays to the daemon
// (`tether web`'s `/ws/daemon/<id>`), the server holding the daemon's token.
//
// `close()` does not wait on a dead connection: a socket whose close handshake is not
// answered within `closeTimeout` is reported closed all the same (and its late frames are
// dropped), so a page that finds its connection dead after a sleep can drop it and reconnect.
//
// A browser does not say why a handshake failed (a 401, a 404, a refused connection all look
// alike), so a failure to open is a `ConnectionError` coded HANDSHAKE, with the URL.

import { ConnectionError } from "./errors.js";
import type { Connector, Socket, SocketHandlers } from "./transport.js";

/** The part of the WebSocket API the connector uses. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
}

export interface WebSocketConnectorOptions {
  /** Makes the socket (default: `new WebSocket(url)`); a test passes one with headers, say. */
  create?: (url: string) => WebSocketLike;
  /** Milliseconds the handshake may take (default 10000). */
  timeout?: number;
  /**
   * Milliseconds `close()` waits for the close handshake before the socket counts as closed
   * anyway (default 2000): a connection that died while a phone slept never answers it.
   */
  closeTimeout?: number;
}

/**
 * A connector that opens a WebSocket to `url` (a function: read afresh for every
 * reconnection) and speaks text frames over it.
 */
export function webSocketConnector(url: string | (() => string), options: WebSocketConnectorOptions = {}): Connector {
  const create = options.create ?? ((address: string) => new WebSocket(address) as unknown as WebSocketLike);
  const timeout = options.timeout ?? 10000;
  const closeTimeout = options.closeTimeout ?? 2000;
  return (handlers: SocketHandlers) =>
    new Promise<Socket>((resolve, reject) => {
      const address = typeof url === "string" ? url : url();
      let ws: WebSocketLike;
      try {
        ws = create(address);
      } catch (err) {
        reject(new ConnectionError("HANDSHAKE", `cannot open a websocket to ${address}: ${String(err)}`, { cause: err }));
        return;
      }
      let open = false;
      let done = false;
      const finish = (info: { code: number; reason: string }): void => {
        if (done) return;
        done = true;
        handlers.closed(info);
      };
      const timer = setTimeout(() => {
        if (open) return;
        ws.onclose = null;
        ws.close();
        reject(new ConnectionError("TIMEOUT", `no websocket handshake from ${address} within ${timeout} ms`));
      }, timeout);
      ws.onerror = () => {}; // a close follows, which says what there is to say
      ws.onopen = () => {
        open = true;
        clearTimeout(timer);
        resolve({
          send: (text) => ws.send(text),
          close: () => {
            ws.close(1000);
            setTimeout(() => finish({ code: 1006, reason: "no answer to the close handshake" }), closeTimeout);
          },
        });
      };
      ws.onmessage = (event) => {
        if (!done && typeof event.data === "string") handlers.message(event.data);
      };
      ws.onclose = (event) => {
        clearTimeout(timer);
        if (!open) {
          done = true;
          reject(new ConnectionError("HANDSHAKE", `the websocket to ${address} did not open (code ${event.code})`));
          return;
        }
        finish({ code: event.code, reason: event.reason });
      };
    });
}
