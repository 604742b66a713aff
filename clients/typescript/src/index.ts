// tether-client for Node: everything in `./browser.js`, plus finding and starting the
// daemon and the `ws` websocket.

export * from "./browser.js";
export {
  NodeSocket,
  connect,
  daemonConnector,
  locate,
  openSocket,
  readDiscovery,
  resolveWorkspace,
  workspaceKey,
  type ConnectOptions,
  type LocateOptions,
  type Located,
} from "./node.js";
