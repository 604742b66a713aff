// What the editor shows, as a turn's `editor` context: the active file with its cursor and
// selection, and the other files open (`EditorContext` in the protocol).
//
// Paths inside the workspace go relative to it (what the model sees); a path outside it goes
// absolute, and the daemon reports it rather than reading it. Documents that are not files
// (untitled, output panes, diff sides) are left out. A selection longer than the daemon
// keeps is cut here the same way, head and tail kept, so a huge selection never makes a
// huge frame.

import path from "node:path";

import type { EditorContext } from "tether-client/browser";

/** The daemon's cap on a selection (`SELECTION_CAP` in daemon/context/mentions.py). */
export const SELECTION_CAP = 6000;

export interface EditorSnapshot {
  workspace: string;
  /** The active editor's file, if it is a file. Positions are VS Code's (0-based). */
  active?: { file: string; line: number; character: number; selection?: string } | null;
  /** Every file open in an editor tab, in tab order (the active one may be among them). */
  open?: string[];
}

/** The `editor` context of a turn, or null when the editor shows no file. */
export function buildEditorContext(snapshot: EditorSnapshot): EditorContext | null {
  const context: EditorContext = {};
  const active = snapshot.active ?? null;
  if (active !== null) {
    context.openFile = relative(snapshot.workspace, active.file);
    context.cursor = { line: active.line + 1, column: active.character + 1 };
    if (active.selection && active.selection.trim() !== "") context.selection = capSelection(active.selection);
  }
  const activeFile = active ? path.resolve(active.file) : null;
  const seen = new Set<string>();
  const others: string[] = [];
  for (const file of snapshot.open ?? []) {
    const resolved = path.resolve(file);
    if (resolved === activeFile || seen.has(resolved)) continue;
    seen.add(resolved);
    others.push(relative(snapshot.workspace, resolved));
  }
  if (others.length > 0) context.openFiles = others;
  return Object.keys(context).length > 0 ? context : null;
}

function relative(workspace: string, file: string): string {
  const rel = path.relative(workspace, file);
  return rel !== "" && !rel.startsWith("..") && !path.isAbsolute(rel) ? rel.split(path.sep).join("/") : path.resolve(file);
}

/** `selection` within `SELECTION_CAP` characters, its head and tail kept. */
export function capSelection(selection: string): string {
  if (selection.length <= SELECTION_CAP) return selection;
  const marker = "\n[… characters cut here …]\n";
  const keep = SELECTION_CAP - marker.length;
  const head = Math.ceil(keep / 2);
  return selection.slice(0, head) + marker + selection.slice(selection.length - (keep - head));
}
