// The browser page's list of workspaces and their sessions (fed by `tether web`'s
// /ws/overview), and what in it is worth a notification. Pure (no DOM), so the tests run it
// in Node; every string from a daemon is escaped as the session pane escapes it.
//
// Stable `data-testid`s: workspace (with data-workspace-id, data-running), workspace-name,
// start-workspace, new-session-in, worktree-for, session-entry (with data-session-id,
// data-state), session-state, worktree-badge.

import type { SessionInfo } from "tether-client/browser";

import { escapeHtml as esc } from "../core/markdown.js";
import { visible } from "../webview/render.js";

/** A workspace as `GET /api/workspaces` and /ws/overview give it. */
export interface Workspace {
  id: string;
  root: string;
  name: string;
  running: boolean;
  sessions: SessionInfo[];
}

/** What the list says of a session's state. */
const STATE_WORDS: Record<string, string> = {
  running: "running",
  awaiting_approval: "needs approval",
  idle: "idle",
  failed: "failed",
  cancelled: "cancelled",
  interrupted: "interrupted",
  paused: "paused",
};

const shown = (text: string): string => esc(visible(text, { joiners: true }));

/** The list, `selected` (workspace id and session id) marked. */
export function renderOverview(workspaces: readonly Workspace[], selected: { workspaceId: string; sessionId: string | null } | null): string {
  if (workspaces.length === 0) {
    return `<p class="empty">No workspaces yet: run <code>tether</code> in a project folder, and it shows here.</p>`;
  }
  return workspaces.map((w) => renderWorkspace(w, selected)).join("\n");
}

function renderWorkspace(w: Workspace, selected: { workspaceId: string; sessionId: string | null } | null): string {
  const id = esc(w.id);
  const actions = w.running
    ? `<button data-testid="new-session-in" data-action="newSessionIn" data-workspace-id="${id}">New session</button>` +
      `<label title="The new session works in a git worktree of its own"><input type="checkbox" data-testid="worktree-for" data-worktree-for="${id}"> worktree</label>`
    : `<button data-testid="start-workspace" data-action="startWorkspace" data-workspace-id="${id}">Start</button>`;
  const sessions = w.sessions.map((s) => {
    const state = s.state ?? "idle";
    const current = selected?.workspaceId === w.id && selected.sessionId === s.id;
    const branch = s.worktree?.branch;
    return (
      `<li><button class="session-entry${current ? " selected" : ""}" data-testid="session-entry" data-action="openSession"` +
      ` data-workspace-id="${id}" data-session-id="${esc(s.id)}" data-state="${esc(state)}"${current ? ` aria-current="true"` : ""}>` +
      `<span class="title">${shown(s.title || "(untitled)")}</span>` +
      `<span class="badges"><span class="badge state ${esc(state)}" data-testid="session-state">${esc(STATE_WORDS[state] ?? state)}</span>` +
      (branch ? `<span class="badge worktree" data-testid="worktree-badge">⎇ ${shown(branch)}</span>` : "") +
      `</span></button></li>`
    );
  });
  return (
    `<section class="workspace" data-testid="workspace" data-workspace-id="${id}" data-running="${w.running}">` +
    `<div class="workspace-head"><span class="workspace-name" data-testid="workspace-name" title="${shown(w.root)}">${shown(w.name)}</span>` +
    `<span class="workspace-state">${w.running ? "" : "not running"}</span></div>` +
    `<div class="workspace-actions">${actions}</div>` +
    (sessions.length > 0 ? `<ul class="sessions">${sessions.join("")}</ul>` : w.running ? `<p class="empty">No sessions.</p>` : "") +
    `</section>`
  );
}

/** A notification to show. */
export interface Notice {
  title: string;
  body: string;
  /** One notification per session: a newer one replaces it. */
  tag: string;
}

/** The sessions' states by `workspace id/session id`. */
export function sessionStates(workspaces: readonly Workspace[]): Map<string, string> {
  const states = new Map<string, string>();
  for (const w of workspaces) for (const s of w.sessions) states.set(`${w.id}/${s.id}`, s.state ?? "idle");
  return states;
}

const BUSY = new Set(["running", "awaiting_approval"]);

/**
 * What changed from `before` to `workspaces` that a person away from the tab wants to know:
 * a session that came to need an approval, and a turn that ended or failed. Sessions not
 * in `before` (new, or the first update) say nothing.
 */
export function notices(before: ReadonlyMap<string, string>, workspaces: readonly Workspace[]): Notice[] {
  const out: Notice[] = [];
  for (const w of workspaces) {
    for (const s of w.sessions) {
      const key = `${w.id}/${s.id}`;
      const was = before.get(key);
      const now = s.state ?? "idle";
      if (was === undefined || was === now) continue;
      // Plain text (a notification is not HTML), hidden characters shown as escapes.
      const title = visible(s.title || "(untitled)", { joiners: true });
      const where = visible(w.name, { joiners: true });
      if (now === "awaiting_approval") out.push({ title: `${where}: needs approval`, body: title, tag: key });
      else if (BUSY.has(was) && now === "failed") out.push({ title: `${where}: turn failed`, body: title, tag: key });
      else if (BUSY.has(was) && !BUSY.has(now)) out.push({ title: `${where}: turn ended`, body: title, tag: key });
    }
  }
  return out;
}

/** A `{"type": "workspaces", ...}` frame from /ws/overview, or null when it is not one. */
export function parseOverview(text: string): Workspace[] | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (value === null || typeof value !== "object") return null;
  const frame = value as { type?: unknown; workspaces?: unknown };
  if (frame.type !== "workspaces" || !Array.isArray(frame.workspaces)) return null;
  return frame.workspaces.filter(
    (w): w is Workspace =>
      w !== null && typeof w === "object" && typeof w.id === "string" && typeof w.name === "string" && Array.isArray(w.sessions),
  );
}
