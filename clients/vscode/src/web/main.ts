// The browser page of `tether web`: the session view VS Code's webview shows (webview/page.ts,
// rendering the same state), with the `SessionController` running here in the page over a
// websocket that the server relays to the workspace's daemon (/ws/daemon/<id>), and beside it
// the list of every workspace and session (/ws/overview).
//
// Rules:
// - One workspace's controller at a time: opening a session of another workspace closes the
//   first workspace's connection (its daemon keeps everything).
// - Both sockets reconnect by themselves, for as long as the page is open (a phone's sleep,
//   a dropped network, a restarted server); the session catches up from its cursor.
// - Notifications (a session needs an approval, a turn ended or failed) only while the tab
//   is hidden, and only once the person allowed them (asked on their click, once).
// - The shown workspace and, per workspace, the shown session are kept in localStorage.

import { TetherClient, webSocketConnector } from "tether-client/browser";

import { SessionController, type Host } from "../core/controller.js";
import type { DiffDocuments } from "../core/diff.js";
import type { FromWebview, ToWebview } from "../core/messages.js";
import { emptyState } from "../core/viewState.js";
import type { PageHost } from "../webview/host.js";
import { startPage } from "../webview/page.js";
import { visible } from "../webview/render.js";
import { fileTitle, renderFileWindow } from "./fileView.js";
import { notices, parseOverview, renderOverview, sessionStates, type Workspace } from "./overview.js";

const RECONNECT_DELAYS = [100, 250, 500, 1000, 2000, 5000];
const SHOWN_WORKSPACE = "tether-web:workspace";
const PAGE_STATE = "tether-web:page";

const body = document.body;
const list = document.getElementById("workspaces")!;
const overviewStatus = document.getElementById("overview-status")!;
const notifyButton = document.getElementById("notify") as HTMLButtonElement;
const toast = document.getElementById("toast")!;
const diffDialog = document.getElementById("diff") as HTMLDialogElement;
const fileDialog = document.getElementById("file") as HTMLDialogElement;
const prompt = document.getElementById("prompt") as HTMLTextAreaElement;

const socketBase = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`;

let workspaces: Workspace[] = [];
let states = new Map<string, string>();
let current: { workspace: string; controller: SessionController } | null = null;

function showList(show: boolean): void {
  body.classList.toggle("show-list", show);
}

// --- the session view -----------------------------------------------------------------------

const pageHost: PageHost = {
  // Later, as postMessage delivers: the page says `ready` before `startPage` has returned.
  post: (message: FromWebview) => queueMicrotask(() => void fromPage(message)),
  loadState: () => {
    try {
      return JSON.parse(sessionStorage.getItem(PAGE_STATE) ?? "null") as unknown;
    } catch {
      return undefined;
    }
  },
  saveState: (state) => sessionStorage.setItem(PAGE_STATE, JSON.stringify(state)),
};
const page = startPage(pageHost);

async function fromPage(message: FromWebview): Promise<void> {
  if (message.type === "pickSession") {
    showList(true);
    return;
  }
  if (current === null) {
    if (message.type === "ready") page.receive({ type: "state", state: emptyState("closed") });
    else if (message.type === "newSession" || message.type === "send") {
      const running = workspaces.filter((w) => w.running);
      if (running.length === 1) {
        select(running[0]!.id).handle(message);
        return;
      }
      notify("info", "Choose a workspace first.");
      if (message.type === "send") page.receive({ type: "restorePrompt", text: message.text });
    }
    return;
  }
  await current.controller.handle(message);
}

function memory(workspaceId: string): Host["memory"] {
  const key = `tether-web:session:${workspaceId}`;
  return {
    get: () => localStorage.getItem(key) ?? undefined,
    set: (sessionId) => (sessionId === undefined ? localStorage.removeItem(key) : localStorage.setItem(key, sessionId)),
  };
}

function browserHost(workspaceId: string): Host {
  return {
    post: (message: ToWebview) => {
      if (current?.workspace === workspaceId) page.receive(message);
    },
    changed: () => renderList(),  // the shown session is marked in the list
    editorContext: () => null,
    readFile: async () => null, // the page reads no files: a diff shows its hunks
    openLocation: (path, line) => showFile(workspaceId, path, line),
    openDiff: async (documents, title) => showDiff(documents, title),
    notify,
    confirm: async (message) => window.confirm(message),
    pickSession: async () => {
      showList(true);
      return null;
    },
    copy: async (text) => navigator.clipboard.writeText(text),
    insertAtCursor: async (text) => {
      const at = prompt.selectionStart;
      prompt.setRangeText(text, at, prompt.selectionEnd, "end");
      prompt.focus();
      return true;
    },
    memory: memory(workspaceId),
  };
}

/** Show workspace `workspaceId`'s sessions through its own controller (made when it changes). */
function select(workspaceId: string): SessionController {
  if (current?.workspace === workspaceId) return current.controller;
  current?.controller.dispose();
  const root = workspaces.find((w) => w.id === workspaceId)?.root ?? "";
  const url = `${socketBase}/ws/daemon/${encodeURIComponent(workspaceId)}`;
  const controller = new SessionController(root, browserHost(workspaceId), () =>
    TetherClient.connect({
      connector: webSocketConnector(url),
      clientName: "tether web",
      reconnectDelays: RECONNECT_DELAYS,
      reconnectTimeout: Number.MAX_SAFE_INTEGER, // a phone may sleep for hours
    }),
  );
  current = { workspace: workspaceId, controller };
  localStorage.setItem(SHOWN_WORKSPACE, workspaceId);
  page.receive({ type: "state", state: controller.state });
  return controller;
}

async function openSession(workspaceId: string, sessionId: string): Promise<void> {
  const controller = select(workspaceId);
  showList(false);
  try {
    await controller.attach(sessionId);
  } catch (err) {
    controller.fail(err);
  }
  renderList();
}

async function newSessionIn(workspaceId: string, worktree: boolean): Promise<void> {
  const controller = select(workspaceId);
  showList(false);
  await controller.handle(worktree ? { type: "newSession", worktree: true } : { type: "newSession" });
  prompt.focus();
}

async function startWorkspace(workspaceId: string): Promise<void> {
  const answer = await fetch(`/api/workspaces/${encodeURIComponent(workspaceId)}/start`, { method: "POST" });
  const result = (await answer.json().catch(() => ({ ok: false, error: `HTTP ${answer.status}` }))) as { ok: boolean; error?: string };
  if (!result.ok) notify("error", `Could not start the daemon: ${result.error ?? "no reason given"}`);
}

// --- what the page shows beside the session ----------------------------------------------

function notify(level: "info" | "warning" | "error", message: string): void {
  toast.textContent = message;
  toast.dataset.level = level;
  toast.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (toast.hidden = true), 6000);
}
let toastTimer: ReturnType<typeof setTimeout> | undefined;

function showDiff(documents: DiffDocuments, title: string): void {
  document.getElementById("diff-title")!.textContent = title;
  document.getElementById("diff-before")!.textContent = documents.before;
  document.getElementById("diff-after")!.textContent = documents.after;
  diffDialog.showModal();
}

/** The lines around `path:line`, read by the daemon (relative to the shown session's root). */
async function showFile(workspaceId: string, path: string, line: number): Promise<void> {
  if (current?.workspace !== workspaceId) return;
  const controller = current.controller;
  try {
    const client = await controller.client();
    const window = await client.readFile(path, { sessionId: controller.session?.id ?? null, line });
    document.getElementById("file-title")!.textContent = fileTitle(window, line);
    const lines = document.getElementById("file-lines")!;
    lines.innerHTML = renderFileWindow(window, line);
    fileDialog.showModal();
    lines.querySelector(".current")?.scrollIntoView({ block: "center" });
  } catch (err) {
    notify("error", visible(`Could not show ${path}: ${err instanceof Error ? err.message : String(err)}`));
  }
}

let listHtml = "";

/** Render the list when it changed (a list rebuilt under a finger would lose the tap). */
function renderList(): void {
  const shown = current?.controller.session?.id ?? null;
  const html = renderOverview(workspaces, current ? { workspaceId: current.workspace, sessionId: shown } : null);
  if (html === listHtml) return;
  listHtml = html;
  list.innerHTML = html;
}

// --- /ws/overview ---------------------------------------------------------------------------

let overviewSocket: WebSocket | null = null;

function watchOverview(attempt = 0): void {
  const ws = new WebSocket(`${socketBase}/ws/overview`);
  overviewSocket = ws;
  ws.onopen = () => {
    attempt = 0;
    overviewStatus.textContent = "";
  };
  ws.onmessage = (event: MessageEvent<unknown>) => {
    if (typeof event.data !== "string") return;
    const next = parseOverview(event.data);
    if (next === null) return;
    if (document.hidden) for (const n of notices(states, next)) showNotification(n.title, n.body, n.tag);
    states = sessionStates(next);
    const first = workspaces.length === 0 && current === null;
    workspaces = next;
    renderList();
    if (first) restore();
  };
  ws.onclose = () => {
    if (overviewSocket !== ws) return;
    overviewSocket = null;
    overviewStatus.textContent = "reconnecting…";
    // A browser does not say why a websocket was refused: ask over plain HTTP whether the
    // page is still signed in (a server restarted with new credentials signs it out).
    void fetch("/api/workspaces").then(
      (answer) => {
        if (answer.status === 401) overviewStatus.textContent = "signed out: open the URL `tether web` printed";
      },
      () => {},
    );
    const delay = RECONNECT_DELAYS[Math.min(attempt, RECONNECT_DELAYS.length - 1)]!;
    setTimeout(() => watchOverview(attempt + 1), delay);
  };
}

/** Show again the workspace (and its session) shown before a reload. */
function restore(): void {
  const id = localStorage.getItem(SHOWN_WORKSPACE);
  if (id === null || !workspaces.some((w) => w.id === id && w.running)) return;
  const controller = select(id);
  void controller.restore().then(
    () => {
      if (controller.session !== null) showList(false);
      renderList();
    },
    (err: unknown) => controller.fail(err),
  );
}

// --- notifications ----------------------------------------------------------------------------

function showNotification(title: string, text: string, tag: string): void {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  new Notification(title, { body: text, tag });
}

function offerNotifications(): void {
  notifyButton.hidden = !("Notification" in window) || Notification.permission !== "default";
}

notifyButton.addEventListener("click", () => {
  void Notification.requestPermission().then(offerNotifications);
});

// --- the person's clicks outside the session pane ----------------------------------------------

document.addEventListener("click", (event) => {
  const button = (event.target as HTMLElement).closest<HTMLElement>("[data-action]");
  if (button === null) return;
  const { action, workspaceId, sessionId } = button.dataset;
  switch (action) {
    case "openSession":
      if (workspaceId && sessionId) void openSession(workspaceId, sessionId);
      break;
    case "newSessionIn":
      if (workspaceId) {
        const box = list.querySelector<HTMLInputElement>(`input[data-worktree-for="${CSS.escape(workspaceId)}"]`);
        void newSessionIn(workspaceId, box?.checked ?? false);
      }
      break;
    case "startWorkspace":
      if (workspaceId) void startWorkspace(workspaceId);
      break;
    case "showList":
      showList(true);
      break;
    case "closeDiff":
      diffDialog.close();
      break;
    case "closeFile":
      fileDialog.close();
      break;
  }
});

// After a sleep or a network change a socket may be dead without knowing it: the session's
// connection is checked (and made again when it does not answer), the list's is made afresh.
function wake(): void {
  if (document.hidden) return;
  void current?.controller.checkConnection();
  overviewSocket?.close();
}
document.addEventListener("visibilitychange", wake);
window.addEventListener("online", wake);

offerNotifications();
watchOverview();
