// What the suites share: the library's isolated user, model server and CLI
// (`tether-client/testing`), with a Python file in the workspace, and a `Host` that records
// what the controller asks of VS Code.

import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";

import { TetherClient, connect, readDiscovery, webSocketConnector, type EditorContext } from "tether-client";
import { Home as LibraryHome, tokenWebSocket } from "tether-client/testing";

import { SessionController, type Host, type SessionMemory } from "../src/core/controller.js";
import type { DiffDocuments } from "../src/core/diff.js";
import type { ToWebview } from "../src/core/messages.js";
import type { PickerEntry } from "../src/core/picker.js";
import type { ViewState } from "../src/core/viewState.js";

/** The library's test home (`tether-client/testing`) with a Python file in its workspace, and
 * the clients the extension's code is tested with. */
export class Home {
  private constructor(private readonly home: LibraryHome) {}

  static async create(script?: object): Promise<Home> {
    const home = await LibraryHome.create(script);
    await mkdir(path.join(home.workspace, "src"));
    await writeFile(path.join(home.workspace, "src", "app.py"), "def greet(name):\n    return f'hello {name}'\n");
    return new Home(home);
  }

  get workspace(): string {
    return this.home.workspace;
  }

  setScript(script: object): Promise<void> {
    return this.home.model.setScript(script);
  }

  /** Let streams held by a step's `hold_at_chunks` go on past one more hold. */
  release(): Promise<void> {
    return this.home.model.release();
  }

  /** A client of this home's daemon (started when none runs). */
  client(name = "other-client"): Promise<TetherClient> {
    return connect({ ...this.home.options(), clientName: name });
  }

  /** A controller as the extension makes it, with a recording host. */
  controller(host = new RecordingHost()): { controller: SessionController; host: RecordingHost } {
    const controller = new SessionController(this.workspace, host, () => this.client("vscode"));
    return { controller, host };
  }

  /**
   * A controller as the browser page makes it: over the WebSocket-API connector, `ws` standing
   * in for the browser's WebSocket and adding the daemon's token as `tether web` does. `sockets`
   * gets every socket it opens (a test drops one to see the page reconnect).
   */
  async webController(sockets: unknown[] = []): Promise<{ controller: SessionController; host: RecordingHost }> {
    (await this.client()).close(); // starts the daemon
    const { port, token } = await readDiscovery(this.home.discoveryFile);
    const create = tokenWebSocket(token, sockets as Parameters<typeof tokenWebSocket>[1]);
    const host = new RecordingHost();
    const connector = webSocketConnector(`ws://127.0.0.1:${port}/`, { create });
    const controller = new SessionController(this.workspace, host, () =>
      TetherClient.connect({ connector, clientName: "tether web", reconnectDelays: [50, 100, 250] }),
    );
    return { controller, host };
  }

  /** A controller whose daemon is looked for with `python`, for `workspace` (one where no daemon runs). */
  controllerWithPython(python: string, workspace: string): { controller: SessionController; host: RecordingHost } {
    const host = new RecordingHost();
    const options = { ...this.home.options(), workspace, python, clientName: "vscode" };
    return { controller: new SessionController(workspace, host, () => connect(options)), host };
  }

  /** The CLI (`python -P -m tether.clients.cli.main`) in this home, from the workspace. */
  cli(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return this.home.cli(...args);
  }

  /** Stop the workspace's daemon and the model server; remove it all. */
  close(): Promise<void> {
    return this.home.close();
  }
}

export class StoredSession implements SessionMemory {
  value: string | undefined;

  get(): string | undefined {
    return this.value;
  }

  set(sessionId: string | undefined): void {
    this.value = sessionId;
  }
}

/** A `Host` that records what it is asked and answers as told. */
export class RecordingHost implements Host {
  readonly posted: ViewState[] = [];
  /** Texts put back into the prompt box. */
  readonly restored: string[] = [];
  readonly notices: Array<{ level: string; message: string }> = [];
  readonly diffs: Array<{ documents: DiffDocuments; title: string; root: string; pending?: { approvalId: string } }> = [];
  readonly confirmations: string[] = [];
  editor: EditorContext | null = null;
  /** The workspace's memory of the shown session (kept by VS Code across reloads). */
  readonly memory = new StoredSession();
  confirmAnswer = false;
  pick: (entries: PickerEntry[]) => string | null = () => null;
  #waiters: Array<{ check: (s: ViewState) => boolean; resolve: (s: ViewState) => void }> = [];

  post(message: ToWebview): void {
    if (message.type === "restorePrompt") {
      this.restored.push(message.text);
      return;
    }
    this.posted.push(message.state);
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.check(message.state)) return true;
      w.resolve(message.state);
      return false;
    });
  }

  /** The places `openLocation` was asked to show, with the folder `path` is relative to. */
  readonly locations: Array<{ path: string; line: number; root: string }> = [];

  async readFile(relativePath: string, root: string): Promise<string | null> {
    return readFile(path.resolve(root, relativePath), "utf8").catch(() => null);
  }

  async openLocation(file: string, line: number, root: string): Promise<void> {
    this.locations.push({ path: file, line, root });
  }

  readonly copied: string[] = [];
  /** What was inserted at the cursor; null: no editor is active. */
  inserted: string[] | null = null;

  async copy(text: string): Promise<void> {
    this.copied.push(text);
  }

  async insertAtCursor(text: string): Promise<boolean> {
    this.inserted?.push(text);
    return this.inserted !== null;
  }

  editorContext(): EditorContext | null {
    return this.editor;
  }

  async openDiff(documents: DiffDocuments, title: string, root: string, pending?: { approvalId: string }): Promise<void> {
    this.diffs.push(pending ? { documents, title, root, pending } : { documents, title, root });
  }

  notify(level: "info" | "warning" | "error", message: string): void {
    this.notices.push({ level, message });
  }

  async confirm(message: string): Promise<boolean> {
    this.confirmations.push(message);
    return this.confirmAnswer;
  }

  async pickSession(entries: PickerEntry[]): Promise<string | null> {
    return this.pick(entries);
  }

  /**
   * Resolves with the first state posted (from now, or the last one already) that satisfies
   * `check`. Rejects, showing the last state, after `failAfter` ms: a bound on a wait for I/O
   * that went wrong, not a measure of speed.
   */
  waitForState(check: (s: ViewState) => boolean, failAfter = 30_000): Promise<ViewState> {
    const last = this.posted.at(-1);
    if (last !== undefined && check(last)) return Promise.resolve(last);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        reject(new Error(`no such state within ${failAfter} ms; the last: ${JSON.stringify(this.posted.at(-1))}`));
      }, failAfter);
      const waiter = {
        check,
        resolve: (s: ViewState) => {
          clearTimeout(timer);
          resolve(s);
        },
      };
      this.#waiters.push(waiter);
    });
  }
}
