// The parts of the library that run anywhere (a browser, a VS Code webview): the client,
// the session view and the protocol types. The host supplies the `Connector`.

export * from "./protocol.js";
export { Connection, type ConnectionEvents } from "./connection.js";
export {
  AttachedSession,
  CLIENT_VERSION,
  TetherClient,
  type ClientEvents,
  type ClientOptions,
  type SessionEvents,
  type SessionStatistics,
} from "./client.js";
export { ConnectionError, DiscoveryError, RpcError } from "./errors.js";
export type { Connector, Endpoint, Socket, SocketHandlers } from "./transport.js";
export { SessionView, TurnView } from "./view.js";
export { webSocketConnector, type WebSocketConnectorOptions, type WebSocketLike } from "./websocket.js";
