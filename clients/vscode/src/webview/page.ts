// The session view's script, the same in VS Code's webview and the browser page: renders the
// state its host posts (`receive`) and sends the host what the person does. It holds no
// connection: the host does (VS Code's extension host; in the browser, the page's own
// controller). The prompt box is outside the re-rendered pane, so typing survives every update.

import type { ToWebview } from "../core/messages.js";
import type { ViewState } from "../core/viewState.js";
import type { PageHost } from "./host.js";
import { renderSession, settingsChoices, type Choice } from "./render.js";

export interface Page {
  /** A message from the host: a new state, or text back into the prompt box. */
  receive(message: ToWebview): void;
}

/** Wire the page's elements (html.ts, or the browser's index.html) to `host`. */
export function startPage(host: PageHost): Page {
  const pane = document.getElementById("pane")!;
  const prompt = document.getElementById("prompt") as HTMLTextAreaElement;
  // Absent where there is no editor (the browser).
  const withEditor = document.getElementById("with-editor") as HTMLInputElement | null;
  const worktree = document.getElementById("worktree") as HTMLInputElement | null;
  const fork = document.getElementById("fork") as HTMLButtonElement | null;
  const cancel = document.getElementById("cancel") as HTMLButtonElement;
  const undo = document.getElementById("undo") as HTMLButtonElement;
  const modelSelect = document.getElementById("model") as HTMLSelectElement;
  const modeSelect = document.getElementById("mode") as HTMLSelectElement;
  // Kept by the host across reloads of the page: the open tool outputs and the unsent prompt.
  const saved = (host.loadState() as { expanded?: string[]; draft?: string } | undefined) ?? {};
  const expanded = new Set<string>(saved.expanded ?? []);
  if (typeof saved.draft === "string") prompt.value = saved.draft;
  const save = (): void => host.saveState({ expanded: [...expanded], draft: prompt.value });
  let state: ViewState | null = null;

  function render(): void {
    if (state === null) return;
    const stick = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 40;
    pane.innerHTML = renderSession(state, expanded);
    if (stick) pane.scrollTop = pane.scrollHeight;
    const { models, modes } = settingsChoices(state.settings);
    fill(modelSelect, models, state.settings.model);
    fill(modeSelect, modes, state.settings.permissionMode);
    cancel.disabled = state.runningTurnId === null;
    undo.disabled = !state.canUndo;
    if (fork !== null) fork.disabled = state.session === null;
  }

  /** Give `select` these options (rebuilt only when they change, so an open list stays open) and this value. */
  function fill(select: HTMLSelectElement, choices: Choice[], value: string): void {
    const key = JSON.stringify(choices);
    if (select.dataset.choices !== key) {
      select.replaceChildren(
        ...choices.map((c) => {
          const option = document.createElement("option");
          option.value = c.value;
          option.textContent = c.label;
          return option;
        }),
      );
      select.dataset.choices = key;
    }
    if (select.value !== value) select.value = value;
  }

  modelSelect.addEventListener("change", () => host.post({ type: "configure", model: modelSelect.value }));
  modeSelect.addEventListener("change", () => {
    const mode = modeSelect.value;
    if (mode === "ask" || mode === "edits" || mode === "auto") host.post({ type: "configure", permissionMode: mode });
  });

  function send(): void {
    const text = prompt.value;
    if (text.trim() === "") return;
    host.post({ type: "send", text, withEditor: withEditor?.checked ?? false });
    prompt.value = "";
    save();
  }

  /** Put text that did not reach the session back in the prompt box, before what is typed there now. */
  function restorePrompt(text: string): void {
    prompt.value = prompt.value.trim() === "" ? text : `${text}\n\n${prompt.value}`;
    prompt.focus();
    save();
  }


  // <details> toggles do not bubble: listen in the capture phase to remember open outputs.
  pane.addEventListener(
    "toggle",
    (event) => {
      const target = event.target as HTMLDetailsElement;
      const id = target.dataset.itemId;
      if (target.dataset.testid !== "tool-call" || id === undefined) return;
      if (target.open) expanded.add(id);
      else expanded.delete(id);
      save();
    },
    true,
  );

  document.addEventListener("click", (event) => {
    const button = (event.target as HTMLElement).closest<HTMLElement>("[data-action]");
    if (button === null) return;
    const { action, approvalId, choice, itemId, path, line } = button.dataset;
    switch (action) {
      case "approve":
        if (approvalId && (choice === "allow" || choice === "always" || choice === "deny")) {
          host.post({ type: "approve", approvalId, choice });
        }
        break;
      case "openDiff":
        event.preventDefault();
        if (itemId) host.post({ type: "openDiff", itemId });
        break;
      case "openProposedDiff":
        if (approvalId) host.post({ type: "openProposedDiff", approvalId });
        break;
      case "copyCode":
      case "insertCode": {
        const code = button.closest(".code-block")?.querySelector("code")?.textContent;
        if (code) host.post({ type: action, text: code });
        break;
      }
      case "openLocation":
        if (path && line) host.post({ type: "openLocation", path, line: Number(line) });
        break;
      case "send":
        send();
        break;
      case "newSession":
        host.post(worktree?.checked ? { type: "newSession", worktree: true } : { type: "newSession" });
        break;
      case "cancel":
      case "undo":
      case "fork":
      case "pickSession":
        host.post({ type: action });
        break;
    }
  });

  prompt.addEventListener("input", save);

  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });

  host.post({ type: "ready" });

  return {
    receive(message: ToWebview): void {
      if (message?.type === "state") {
        state = message.state;
        render();
      } else if (message?.type === "restorePrompt") {
        restorePrompt(message.text);
      }
    },
  };
}
