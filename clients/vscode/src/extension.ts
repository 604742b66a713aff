// The VS Code layer, kept thin: it wires VS Code's pieces (the webview view, commands, the
// status bar, the diff editor, quick picks, dialogs) to the `SessionController`, which holds
// the behaviour and knows nothing of VS Code.

import { readFile } from "node:fs/promises";
import path from "node:path";

import { connect } from "tether-client";
import * as vscode from "vscode";

import { SessionController, type Host } from "./core/controller.js";
import type { DiffDocuments } from "./core/diff.js";
import { buildEditorContext } from "./core/editorContext.js";
import type { ToWebview } from "./core/messages.js";
import type { PickerEntry } from "./core/picker.js";
import { userPython } from "./core/settings.js";
import { statusBar } from "./core/viewState.js";
import { makeNonce, webviewHtml } from "./webview/html.js";

const VIEW_ID = "tether.session";
const DIFF_SCHEME = "tether-diff";
const SHOWN_SESSION_KEY = "tether.shownSession";

export function activate(context: vscode.ExtensionContext): void {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (folder === undefined || folder.uri.scheme !== "file") return; // tether works on a folder on disk
  const workspace = folder.uri.fsPath;

  const documents = new DiffContent();
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  status.command = `${VIEW_ID}.focus`;
  let webview: vscode.Webview | null = null;

  const host: Host = {
    post: (message: ToWebview) => void webview?.postMessage(message),
    editorContext: () => editorContext(workspace),
    openDiff: (docs, title, root, pending) => openDiff(documents, root, docs, title, pending),
    readFile: (relativePath, root) => readFile(path.resolve(root, relativePath), "utf8").catch(() => null),
    openLocation: async (file, line, root) => {
      const target = vscode.Uri.file(path.resolve(root, file));
      const at = new vscode.Position(Math.max(0, line - 1), 0);
      await vscode.window.showTextDocument(target, { selection: new vscode.Range(at, at), preview: true });
    },
    notify: (level, message) => {
      const show =
        level === "error"
          ? vscode.window.showErrorMessage
          : level === "warning"
            ? vscode.window.showWarningMessage
            : vscode.window.showInformationMessage;
      void show(`tether: ${message}`);
    },
    confirm: async (message, action) => (await vscode.window.showWarningMessage(message, { modal: true }, action)) === action,
    pickSession: (entries) => pickSession(entries),
    copy: async (text) => vscode.env.clipboard.writeText(text),
    insertAtCursor: async (text) => {
      const editor = vscode.window.activeTextEditor;
      if (editor === undefined) return false;
      return editor.edit((edit) => {
        for (const selection of editor.selections) edit.replace(selection, text);
      });
    },
    memory: {
      get: () => context.workspaceState.get<string>(SHOWN_SESSION_KEY),
      set: (sessionId) => void context.workspaceState.update(SHOWN_SESSION_KEY, sessionId),
    },
    changed: (state) => {
      const { text, tooltip } = statusBar(state);
      status.text = text;
      status.tooltip = tooltip;
    },
  };

  const python = (): string | undefined => userPython(vscode.workspace.getConfiguration("tether").inspect<string>("python"));
  const controller = new SessionController(workspace, host, () =>
    connect({ workspace, clientName: "vscode", clientVersion: String(context.extension.packageJSON.version), python: python() }),
  );
  host.changed?.(controller.state);
  status.show();

  const run =
    (action: (...args: unknown[]) => Promise<unknown>) =>
    async (...args: unknown[]): Promise<void> => {
      try {
        await action(...args);
      } catch (err) {
        controller.fail(err);
      }
    };
  const reveal = (): Thenable<unknown> => vscode.commands.executeCommand(`${VIEW_ID}.focus`);

  context.subscriptions.push(
    status,
    { dispose: () => controller.dispose() },
    vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, documents),
    vscode.window.registerWebviewViewProvider(
      VIEW_ID,
      {
        resolveWebviewView(view) {
          const dist = vscode.Uri.joinPath(context.extensionUri, "dist");
          const media = vscode.Uri.joinPath(context.extensionUri, "media");
          view.webview.options = { enableScripts: true, localResourceRoots: [dist, media] };
          view.webview.html = webviewHtml({
            cspSource: view.webview.cspSource,
            scriptUri: view.webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.js")).toString(),
            styleUri: view.webview.asWebviewUri(vscode.Uri.joinPath(media, "webview.css")).toString(),
            nonce: makeNonce(),
          });
          webview = view.webview;
          view.webview.onDidReceiveMessage((message: unknown) => void controller.handle(message));
          view.onDidDispose(() => {
            if (webview === view.webview) webview = null;
          });
        },
      },
      { webviewOptions: { retainContextWhenHidden: true } },
    ),
    vscode.commands.registerCommand(
      "tether.newSession",
      run(async () => {
        await reveal();
        await controller.newSession();
      }),
    ),
    vscode.commands.registerCommand(
      "tether.attach",
      run(async () => {
        // Pick first: revealing the view moves the focus into its webview a moment later,
        // and a quick pick that loses the focus closes.
        await controller.pick();
        await reveal();
      }),
    ),
    vscode.commands.registerCommand(
      "tether.sendSelection",
      run(async () => {
        const text = await vscode.window.showInputBox({
          prompt: "What should tether do with the selection? (the file, selection and open editors go with it)",
          value: "Explain this.",
        });
        if (text === undefined) return;
        await reveal();
        await controller.send(text, { withEditor: true });
      }),
    ),
    ...(["allow", "deny"] as const).map((choice) =>
      vscode.commands.registerCommand(
        choice === "allow" ? "tether.acceptEdit" : "tether.rejectEdit",
        run(async (uri?: unknown) => {
          const shown = uri instanceof vscode.Uri ? uri : vscode.window.activeTextEditor?.document.uri;
          const approvalId = documents.approvalFor(shown);
          if (approvalId === undefined) throw new Error("this editor shows no edit waiting for an answer");
          const outcome = await controller.answer(approvalId, choice);
          if (outcome.answered) await vscode.commands.executeCommand("workbench.action.closeActiveEditor");
        }),
      ),
    ),
    vscode.commands.registerCommand("tether.cancel", run(() => controller.cancel())),
    vscode.commands.registerCommand("tether.undoTurn", run(() => controller.undo())),
    vscode.commands.registerCommand("tether.trustWorkspace", run(() => controller.toggleTrust())),
    vscode.commands.registerCommand(
      "tether.showDaemonLog",
      run(async () => {
        const file = await controller.daemonLog();
        const editor = await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: true });
        // The newest lines are what a person opening the log looks for.
        const end = editor.document.lineAt(editor.document.lineCount - 1).range.end;
        editor.selection = new vscode.Selection(end, end);
        editor.revealRange(new vscode.Range(end, end), vscode.TextEditorRevealType.Default);
      }),
    ),
  );

  void controller.restore().catch((err: unknown) => controller.fail(err));
}

export function deactivate(): void {}

function editorContext(workspace: string) {
  const editor = vscode.window.activeTextEditor;
  const active =
    editor && editor.document.uri.scheme === "file"
      ? {
          file: editor.document.uri.fsPath,
          line: editor.selection.active.line,
          character: editor.selection.active.character,
          selection: editor.document.getText(editor.selection),
        }
      : null;
  const open: string[] = [];
  for (const group of vscode.window.tabGroups.all) {
    for (const tab of group.tabs) {
      if (tab.input instanceof vscode.TabInputText && tab.input.uri.scheme === "file") open.push(tab.input.uri.fsPath);
    }
  }
  return buildEditorContext({ workspace, active, open });
}

async function pickSession(entries: PickerEntry[]): Promise<string | null> {
  if (entries.length === 0) {
    void vscode.window.showInformationMessage("tether: this workspace has no sessions yet.");
    return null;
  }
  const chosen = await vscode.window.showQuickPick(
    entries.map((e) => ({ label: e.label, description: e.description, detail: e.detail, sessionId: e.sessionId })),
    { title: "tether sessions", placeHolder: "Attach to a session (running ones first)", matchOnDescription: true, matchOnDetail: true },
  );
  return chosen?.sessionId ?? null;
}

/**
 * Before/after documents of one diff each, served under `tether-diff:`. A proposed edit's
 * new side (`/N/proposed/FILE`) names the approval it waits for: the diff editor's Accept and
 * Reject answer it.
 */
class DiffContent implements vscode.TextDocumentContentProvider {
  readonly #texts = new Map<string, string>();
  readonly #approvals = new Map<string, string>();
  #next = 0;

  put(side: "before" | "after" | "proposed", file: string, text: string, approvalId?: string): vscode.Uri {
    this.#next += 1;
    const uri = vscode.Uri.from({ scheme: DIFF_SCHEME, path: `/${this.#next}/${side}/${file}` });
    this.#texts.set(uri.toString(), text);
    if (approvalId !== undefined) this.#approvals.set(uri.toString(), approvalId);
    return uri;
  }

  /** The approval that the proposed edit shown as `uri` waits for. */
  approvalFor(uri: vscode.Uri | undefined): string | undefined {
    return uri === undefined ? undefined : this.#approvals.get(uri.toString());
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.#texts.get(uri.toString()) ?? "";
  }
}

async function openDiff(
  documents: DiffContent,
  root: string,
  docs: DiffDocuments,
  title: string,
  pending?: { approvalId: string },
): Promise<void> {
  const left = documents.put("before", docs.path, docs.before);
  // A made edit's whole file as it is now is the real file, so the person can edit it in
  // place; a proposed edit's new side exists only here.
  const right = pending
    ? documents.put("proposed", docs.path, docs.after, pending.approvalId)
    : docs.whole
      ? vscode.Uri.file(path.resolve(root, docs.path))
      : documents.put("after", docs.path, docs.after);
  await vscode.commands.executeCommand("vscode.diff", left, right, title);
}
