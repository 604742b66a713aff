// What the page needs of whatever embeds it: a way to post to the side that holds the
// connection, and a small store that outlives a reload of the page. In VS Code that is the
// webview API; another embedder (a browser page) supplies its own.

import type { FromWebview } from "../core/messages.js";

export interface PageHost {
  post(message: FromWebview): void;
  /** What `saveState` stored last, or undefined. */
  loadState(): unknown;
  saveState(state: unknown): void;
}

interface VsCodeApi {
  postMessage(message: FromWebview): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

/** The VS Code webview's host (callable once per page, as `acquireVsCodeApi` is). */
export function vsCodeHost(): PageHost {
  const api = acquireVsCodeApi();
  return {
    post: (message) => api.postMessage(message),
    loadState: () => api.getState(),
    saveState: (state) => api.setState(state),
  };
}
