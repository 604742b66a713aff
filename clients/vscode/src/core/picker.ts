// The session picker's entries: every session of the workspace (those started from the
// terminal included, since `session/list` is the daemon's), busy ones first, then the most
// recently active.

import type { SessionInfo } from "tether-client/browser";

export interface PickerEntry {
  sessionId: string;
  label: string;
  description: string;
  detail: string;
  /** A turn is running (or waiting for an approval): attaching joins it mid-turn. */
  busy: boolean;
}

const BUSY = new Set(["running", "awaiting_approval"]);

/** `sessions` as picker entries; `now` in seconds since the epoch. */
export function pickerEntries(sessions: SessionInfo[], options: { attachedId?: string | null; now: number }): PickerEntry[] {
  const entries = sessions.map((s) => {
    const state = s.state ?? (s.status === "running" ? "running" : "idle");
    const busy = BUSY.has(state);
    const icon = state === "awaiting_approval" ? "$(bell-dot)" : busy ? "$(sync~spin)" : "$(comment-discussion)";
    const turns = s.turnCount ?? 0;
    const description = [
      state.replace("_", " "),
      `${turns} turn${turns === 1 ? "" : "s"}`,
      (s.clients ?? 0) > 0 ? `${s.clients} attached` : "",
      s.id === options.attachedId ? "shown" : "",
    ]
      .filter((p) => p !== "")
      .join(" · ");
    return {
      sessionId: s.id,
      label: `${icon} ${s.title || "(untitled)"}`,
      description,
      detail: `${s.id} · ${ago(options.now - s.updatedAt)}`,
      busy,
      updatedAt: s.updatedAt,
    };
  });
  entries.sort((a, b) => Number(b.busy) - Number(a.busy) || b.updatedAt - a.updatedAt);
  return entries.map(({ updatedAt: _, ...entry }) => entry);
}

function ago(seconds: number): string {
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}
