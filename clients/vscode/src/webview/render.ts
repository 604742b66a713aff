// The session pane as HTML (VS Code's webview and the browser page alike), from the state the
// host posts. Pure (no DOM), so the tests render it in Node. Every string from the session is
// escaped, with control, bidi and other hidden characters written as visible escapes
// (`shown`; the agent's Markdown through the renderer, which escapes too); ids go into
// attributes escaped as well.
//
// Stable `data-testid`s (the README lists them): session-title, session-state, messages,
// message (with data-kind), tool-call, tool-progress, tool-output, open-diff, approval (with data-approval-id),
// approval-allow, approval-always, approval-deny, todos, context-meter, error, worktree-badge,
// location (a code-intel result's `path:line`, with data-path and data-line).

import { escapeHtml as esc, renderMarkdown } from "../core/markdown.js";
import type { ApprovalState, DroppedInput, ItemState, SettingsState, ViewState } from "../core/viewState.js";

const STATUS_ICON: Record<string, string> = {
  running: "⏳",
  awaiting_approval: "✋",
  completed: "✓",
  failed: "✗",
  cancelled: "⊘",
};

const CONNECTION_WORDS: Record<ViewState["connection"], string> = {
  connecting: "connecting",
  connected: "connected",
  reconnecting: "reconnecting",
  closed: "not connected",
};

/** The pane for `state`; tool calls whose output is in `expanded` render open. */
export function renderSession(state: ViewState, expanded: ReadonlySet<string> = new Set()): string {
  const parts: string[] = [];
  const session = state.session;
  // Without a session the state shown is the connection's, said once.
  parts.push(
    `<header class="session"><span data-testid="session-title">${shown(session ? session.title || "(untitled)" : "No session")}</span>` +
      (session?.worktreeBranch
        ? ` <span class="badge worktree" data-testid="worktree-badge" title="Works in a git worktree of its own, on this branch">⎇ ${esc(visible(session.worktreeBranch))}</span>`
        : "") +
      ` <span class="state" data-testid="session-state">${esc(session ? session.state.replace("_", " ") : CONNECTION_WORDS[state.connection])}</span>` +
      (session && state.connection !== "connected"
        ? ` <span class="connection" data-testid="connection">${esc(CONNECTION_WORDS[state.connection])}</span>`
        : "") +
      `</header>`,
  );
  if (state.error) parts.push(`<div class="error" data-testid="error">${shown(state.error)}</div>`);
  if (state.context) parts.push(renderContext(state.context));
  const messages: string[] = [];
  for (const turn of state.turns) {
    messages.push(`<section class="turn" data-turn-id="${esc(turn.id)}" data-status="${esc(turn.status)}">`);
    for (const item of turn.items) messages.push(renderItem(item, expanded));
    if (turn.error) messages.push(`<div class="notice error">${shown(turn.error)}</div>`);
    for (const d of state.dropped) if (d.turnId === turn.id) messages.push(renderDropped(d));
    messages.push(`</section>`);
  }
  const turnIds = new Set(state.turns.map((t) => t.id));
  for (const d of state.dropped) if (d.turnId === null || !turnIds.has(d.turnId)) messages.push(renderDropped(d));
  for (const q of state.queued) {
    messages.push(`<div class="message user queued" data-testid="message" data-kind="queued">${shown(q.text)}</div>`);
  }
  parts.push(`<div class="messages" data-testid="messages">${messages.join("")}</div>`);
  if (state.approvals.length > 0) {
    parts.push(`<div class="approvals" data-testid="approvals">${state.approvals.map(renderApproval).join("")}</div>`);
  }
  if (state.todos.length > 0) {
    const todos = state.todos
      .map((t) => `<li class="todo ${esc(t.status)}" data-status="${esc(t.status)}">${shown(t.content)}</li>`)
      .join("");
    parts.push(`<ul class="todos" data-testid="todos">${todos}</ul>`);
  }
  return parts.join("\n");
}

function renderDropped(d: DroppedInput): string {
  return (
    `<div class="message user dropped" data-testid="message" data-kind="dropped" data-input-id="${esc(d.inputId)}">` +
    `<div class="why">Not sent${d.reason ? ` (${shown(d.reason)})` : ""}:</div>${shown(d.text)}</div>`
  );
}

function renderContext(context: NonNullable<ViewState["context"]>): string {
  const label =
    context.percent === null
      ? `${context.used.toLocaleString("en")} tokens`
      : `${context.percent}% of context (${context.used.toLocaleString("en")} / ${context.budget.toLocaleString("en")})`;
  // A <progress>, not a styled bar: the CSP allows no inline styles.
  const value = context.percent === null ? "" : ` value="${context.percent}"`;
  return (
    `<div class="context" data-testid="context-meter" title="${esc(label)}">` +
    `<progress max="100"${value}></progress> <span>${esc(label)}</span></div>`
  );
}

function renderItem(item: ItemState, expanded: ReadonlySet<string>): string {
  const id = esc(item.id);
  switch (item.kind) {
    case "user": {
      const images = (item.images ?? []).map((line) => `<div class="image" data-testid="image">${shown(line)}</div>`).join("");
      return `<div class="message user" data-testid="message" data-kind="user" data-item-id="${id}">${shown(item.text)}${images}</div>`;
    }
    case "agent":
      return (
        `<div class="message agent${item.streaming ? " streaming" : ""}" data-testid="message" data-kind="agent" data-item-id="${id}">` +
        `${item.streaming ? renderMarkdown(prose(item.text)) : finishedMarkdown(prose(item.text))}</div>`
      );
    case "reasoning":
      return (
        `<details class="reasoning" data-testid="message" data-kind="reasoning" data-item-id="${id}"${item.streaming ? " open" : ""}>` +
        `<summary>Reasoning</summary><div>${esc(prose(item.text))}</div></details>`
      );
    case "tool": {
      const open = expanded.has(item.id) || item.status === "awaiting_approval";
      const exit = item.exitCode !== null && item.exitCode !== 0 ? ` <span class="exit">exit ${item.exitCode}</span>` : "";
      const progress = item.progress ? ` <span class="progress" data-testid="tool-progress">${shown(item.progress)}</span>` : "";
      const diff = item.hasDiff
        ? ` <button class="link" data-testid="open-diff" data-action="openDiff" data-item-id="${id}">Open diff</button>`
        : "";
      return (
        `<details class="tool ${esc(item.status)}" data-testid="tool-call" data-item-id="${id}" data-status="${esc(item.status)}"${open ? " open" : ""}>` +
        `<summary><span class="icon">${STATUS_ICON[item.status] ?? ""}</span> <code>${shown(item.title)}</code>${exit}${progress}${diff}</summary>` +
        `<pre data-testid="tool-output">${LOCATION_TOOLS.has(item.tool) ? withLocations(plain(item.output)) : shown(plain(item.output))}</pre></details>`
      );
    }
    case "notice":
      return `<div class="notice ${esc(item.level)}" data-testid="message" data-kind="notice">${shown(item.message)}</div>`;
    case "summary": {
      const files = item.files.map((f) => `${shown(f.path)} <span class="add">+${f.added}</span> <span class="del">−${f.removed}</span>`);
      return (
        `<div class="summary" data-kind="summary" data-stop-reason="${esc(item.stopReason)}">` +
        `${esc(item.stopReason)} · ${item.durationSeconds.toFixed(1)} s${files.length > 0 ? ` · ${files.join(", ")}` : ""}</div>`
      );
    }
    case "compaction":
      return `<div class="notice info" data-kind="compaction">Context compacted (${esc(item.step)}): ${item.tokensBefore} → ${item.tokensAfter} tokens</div>`;
  }
}

// Control characters other than tab and newline, bidi controls, zero-width and other
// format characters, and the line/paragraph separators: shown as escapes in what a person
// approves, so that what they read is what would run, and in the agent's own text, so that
// code it shows reads as it is (no reordered or hidden spans).
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]/g;
// The zero-width joiner and non-joiner shape emoji sequences and some scripts' words: prose keeps them.
const HIDDEN_BUT_JOINERS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]/g;

/**
 * `text` with every hidden character written as an escape (`\x1b`, `\u202e`); with
 * `joiners`, U+200C and U+200D are kept (prose, not something to run).
 */
export function visible(text: string, options: { joiners?: boolean } = {}): string {
  return text.replace(options.joiners ? HIDDEN_BUT_JOINERS : HIDDEN, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

// The page renders the whole session on every update while text streams: finished messages
// come from here, and only the one still growing is parsed and highlighted again.
const finished = new Map<string, string>();
const FINISHED_KEPT = 300;

function finishedMarkdown(text: string): string {
  let html = finished.get(text);
  if (html === undefined) {
    html = renderMarkdown(text);
    if (finished.size >= FINISHED_KEPT) finished.delete(finished.keys().next().value!);
    finished.set(text, html);
  }
  return html;
}

/** The agent's text as shown: line ends normalised, every other hidden character an escape. */
function prose(text: string): string {
  return visible(text.replace(/\r\n?/g, "\n"), { joiners: true });
}

// A terminal's colours and text attributes (SGR: ESC [ … m) are left out of a command's output
// rather than shown as escapes: they only style the text (concealed text is then shown too).
const SGR = /\x1b\[[0-9;:]*m/g;

/** A tool's output without its terminal colours; every other escape sequence stays, to be shown as one. */
function plain(output: string): string {
  return output.replace(SGR, "");
}

/** Text from the session (the model's, a tool's, another client's) as HTML: escaped, hidden characters shown as escapes. */
function shown(text: string): string {
  return esc(prose(text));
}

/** The code-intel tools and grep, whose output names places in the workspace as `path:line`. */
const LOCATION_TOOLS = new Set(["find_definition", "find_references", "symbols", "rename_symbol", "grep"]);
// `path:line` at the start of a line or after a space or bracket: a path of word characters,
// dots, slashes and dashes with a file extension or a slash in it.
const LOCATION = /(^|[\s(\[])((?:[\w.-]+\/)*[\w.-]+\.[\w]+|(?:[\w.-]+\/)+[\w.-]+):(\d+)\b/gm;

/** A code-intel tool's output, escaped, with each `path:line` in it a button that opens it. */
export function withLocations(output: string): string {
  let html = "";
  let last = 0;
  for (const match of output.matchAll(LOCATION)) {
    const [whole, lead, file, line] = match as unknown as [string, string, string, string];
    const start = match.index + lead.length;
    html += shown(output.slice(last, start));
    const text = `${file}:${line}`;
    html +=
      `<button class="link location" data-testid="location" data-action="openLocation" data-path="${esc(file)}" data-line="${esc(line)}">` +
      `${esc(visible(text))}</button>`;
    last = match.index + whole.length;
  }
  return html + shown(output.slice(last));
}

/** What an approval's subject is to the tool, by the approval's kind. */
const APPROVAL_VERBS: Record<string, string> = { command: "run", edit: "edit", read: "read", tool: "call" };

function renderApproval(a: ApprovalState): string {
  const id = esc(a.id);
  const always = a.alwaysRule ? ` title="Always allow: ${esc(visible(a.alwaysRule))}"` : "";
  return (
    `<div class="approval" data-testid="approval" data-approval-id="${id}">` +
    `<div class="what"><strong>${shown(a.tool)}</strong> wants to ${APPROVAL_VERBS[a.kind] ?? "call"}: <code>${esc(visible(a.subject))}</code></div>` +
    `<div class="why">${shown(a.reason)}</div>` +
    (a.preview ? `<pre class="preview">${esc(visible(a.preview))}</pre>` : "") +
    `<div class="buttons">` +
    (a.kind === "edit" && a.preview
      ? `<button class="link" data-testid="approval-diff" data-action="openProposedDiff" data-approval-id="${id}">Open diff</button>`
      : "") +
    `<button data-testid="approval-allow" data-action="approve" data-choice="allow" data-approval-id="${id}">Allow</button>` +
    `<button data-testid="approval-always" data-action="approve" data-choice="always" data-approval-id="${id}"${always}>Always</button>` +
    `<button data-testid="approval-deny" data-action="approve" data-choice="deny" data-approval-id="${id}">Deny</button>` +
    `</div></div>`
  );
}

export interface Choice {
  value: string;
  label: string;
}

const MODE_LABELS: Record<string, string> = {
  ask: "ask: before edits and commands",
  edits: "edits: edit without asking",
  auto: "auto: ask for nothing",
};

/** The model and permission-mode pickers' options; the current value is always among them. */
export function settingsChoices(settings: SettingsState): { models: Choice[]; modes: Choice[] } {
  const models: Choice[] = [{ value: "", label: settings.defaultModel ? `${settings.defaultModel} (default)` : "default model" }];
  for (const id of settings.models) if (id !== settings.defaultModel) models.push({ value: id, label: id });
  if (settings.model !== "" && !models.some((m) => m.value === settings.model)) models.push({ value: settings.model, label: settings.model });
  const modes: Choice[] = Object.entries(MODE_LABELS).map(([value, label]) => ({ value, label }));
  if (settings.permissionMode === "") modes.unshift({ value: "", label: "default mode" });
  else if (!(settings.permissionMode in MODE_LABELS)) modes.push({ value: settings.permissionMode, label: settings.permissionMode });
  return { models, modes };
}
