// The browser page's view of a file around a code-intel location (`path:line`): the page
// cannot open files, so a click asks the daemon for the lines around it (`file/read`) and
// shows them in a dialog. Pure (no DOM), so the tests run it in Node; each line is escaped,
// hidden characters written as escapes, as the session pane shows tool output.
//
// Stable `data-testid`s: file-line (with data-line; the asked line also data-current).

import type { FileReadResult } from "tether-client/browser";

import { escapeHtml as esc } from "../core/markdown.js";
import { visible } from "../webview/render.js";

/** The dialog's title: the file, the asked line, and which of its lines are shown. */
export function fileTitle(window: FileReadResult, line: number): string {
  if (window.lines.length === 0) return `${visible(window.path)}:${line} (empty file)`;
  const last = window.startLine + window.lines.length - 1;
  return `${visible(window.path)}:${line} (lines ${window.startLine}-${last} of ${window.totalLines})`;
}

/** The lines, numbered, `line` marked, as the `<pre>`'s inner HTML. */
export function renderFileWindow(window: FileReadResult, line: number): string {
  const width = String(window.startLine + window.lines.length - 1).length;
  return window.lines
    .map((text, index) => {
      const number = window.startLine + index;
      const current = number === line ? ` class="current" data-current="true"` : "";
      return (
        `<span data-testid="file-line" data-line="${number}"${current}>` +
        `<span class="number">${String(number).padStart(width, " ")}</span>${esc(visible(text))}</span>`
      );
    })
    .join("\n");
}
