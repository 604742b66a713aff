// What the webview and the extension host say to each other over postMessage. The webview
// never talks to the daemon: it shows the state the host posts and asks the host to act.

import type { ApprovalChoice } from "./approvals.js";
import type { PermissionMode, ViewState } from "./viewState.js";
import { PERMISSION_MODES } from "./viewState.js";

export type FromWebview =
  | { type: "ready" }
  | { type: "send"; text: string; withEditor?: boolean }
  | { type: "approve"; approvalId: string; choice: ApprovalChoice }
  | { type: "cancel" }
  | { type: "undo" }
  | { type: "openDiff"; itemId: string }
  /** A pending edit's approval, in the diff editor, to answer there. */
  | { type: "openProposedDiff"; approvalId: string }
  /** `worktree`: the new session works in a git worktree of its own. */
  | { type: "newSession"; worktree?: boolean }
  /** Fork the shown session (its completed turns) and show the fork. */
  | { type: "fork" }
  /** A code-intel result's `path:line` (relative to the workspace): show that file there. */
  | { type: "openLocation"; path: string; line: number }
  | { type: "pickSession" }
  /** The shown session's model ("" : the daemon's) or permission mode; without a session, the next one's. */
  | { type: "configure"; model?: string; permissionMode?: PermissionMode }
  /** A code block's text, to the clipboard / into the active editor at its cursor. */
  | { type: "copyCode"; text: string }
  | { type: "insertCode"; text: string };

export type ToWebview =
  | { type: "state"; state: ViewState }
  /** Text the person wrote that did not reach the session: back into the prompt box. */
  | { type: "restorePrompt"; text: string };

/** `value` as a message from the webview, or null when it is not one (a webview is untrusted input). */
export function parseFromWebview(value: unknown): FromWebview | null {
  if (value === null || typeof value !== "object") return null;
  const m = value as Record<string, unknown>;
  const str = (key: string): boolean => typeof m[key] === "string";
  switch (m.type) {
    case "ready":
    case "cancel":
    case "undo":
    case "fork":
    case "pickSession":
      return { type: m.type };
    case "newSession":
      return m.worktree === true ? { type: "newSession", worktree: true } : { type: "newSession" };
    case "openLocation":
      return str("path") && Number.isInteger(m.line) && (m.line as number) >= 1
        ? { type: "openLocation", path: m.path as string, line: m.line as number }
        : null;
    case "send":
      return str("text") ? { type: "send", text: m.text as string, withEditor: m.withEditor === true } : null;
    case "approve":
      return str("approvalId") && (m.choice === "allow" || m.choice === "always" || m.choice === "deny")
        ? { type: "approve", approvalId: m.approvalId as string, choice: m.choice }
        : null;
    case "openDiff":
      return str("itemId") ? { type: "openDiff", itemId: m.itemId as string } : null;
    case "openProposedDiff":
      return str("approvalId") ? { type: "openProposedDiff", approvalId: m.approvalId as string } : null;
    case "configure": {
      const mode = PERMISSION_MODES.find((p) => p === m.permissionMode);
      const model = str("model") ? (m.model as string) : undefined;
      if ((mode === undefined) === (model === undefined)) return null; // one setting at a time
      return mode !== undefined ? { type: "configure", permissionMode: mode } : { type: "configure", model: model! };
    }
    case "copyCode":
    case "insertCode":
      return str("text") ? { type: m.type, text: m.text as string } : null;
    default:
      return null;
  }
}
