// The transport seam: the library speaks JSON-RPC over any `Socket` a `Connector` opens.
//
// In Node the library opens a websocket itself (`nodeConnector`, on `ws`). A host that owns
// the socket elsewhere supplies its own connector: a VS Code webview, for instance, cannot
// send the bearer token a browser socket would need (and the daemon refuses browser Origins),
// so its extension host holds the websocket and relays frames over `postMessage`; the
// webview's connector returns a `Socket` that sends through that relay.

/** Where a daemon listens and the token it wants (from its discovery file). */
export interface Endpoint {
  host: string;
  port: number;
  token: string;
}

/** What the library is told about an open socket. */
export interface SocketHandlers {
  /** One text frame: one JSON-RPC message. */
  message(text: string): void;
  /** The socket ended, for whatever reason; called once, after which nothing is delivered. */
  closed(info: { code: number; reason: string }): void;
}

/** An open socket to the daemon, as the library uses it. */
export interface Socket {
  /** Send one text frame. Throws, or fails silently and then closes, when it cannot. */
  send(text: string): void;
  /** Close the socket; `handlers.closed` follows. */
  close(): void;
}

/**
 * Opens a socket to the daemon and wires `handlers` to it; resolves once it is open (the
 * websocket handshake, token included, succeeded). Called again for every reconnection, so a
 * connector that finds the daemon afresh each time (as `nodeConnector` does) follows a daemon
 * that restarted on another port. Rejects with a `ConnectionError` when it cannot connect.
 */
export type Connector = (handlers: SocketHandlers) => Promise<Socket>;
