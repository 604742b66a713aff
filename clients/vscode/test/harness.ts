// What the suites share: an isolated user (HOME and XDG folders in a temporary directory)
// with one workspace, the scripted model server (`python -m tether.testing`) as a
// subprocess, the CLI, a `Host` that records what the controller asks of VS Code, and
// stopping the daemon the library started.

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";

import { connect, readDiscovery, workspaceKey, type EditorContext, type TetherClient } from "tether-client";

import { SessionController, type Host } from "../src/core/controller.js";
import type { DiffDocuments } from "../src/core/diff.js";
import type { ToWebview } from "../src/core/messages.js";
import type { PickerEntry } from "../src/core/picker.js";
import type { ViewState } from "../src/core/viewState.js";

export const PYTHON = process.env.TETHER_PYTHON ?? "python3";

export class Home {
  private constructor(
    readonly root: string,
    readonly workspace: string,
    readonly env: NodeJS.ProcessEnv,
    readonly model: ChildProcess,
    readonly modelUrl: string,
  ) {}

  static async create(script: object = { steps: [{ text: "hello" }] }): Promise<Home> {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "tether-vscode-")));
    const workspace = path.join(root, "workspace");
    await mkdir(path.join(workspace, ".git"), { recursive: true });
    await mkdir(path.join(workspace, "src"));
    await writeFile(path.join(workspace, "README.md"), "# Demo project\nIt greets.\n");
    await writeFile(path.join(workspace, "src", "app.py"), "def greet(name):\n    return f'hello {name}'\n");
    await mkdir(path.join(root, "run"), { mode: 0o700 });
    const scriptFile = path.join(root, "script.json");
    await writeFile(scriptFile, JSON.stringify(script));
    const model = spawn(PYTHON, ["-m", "tether.testing", "--script", scriptFile, "--port-file", path.join(root, "model.port")], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      model.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        const match = /listening on (http:\/\/\S+)/.exec(out);
        if (match?.[1]) resolve(match[1]);
      });
      model.on("exit", (code) => reject(new Error(`the model server exited with ${code}`)));
    });
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) {
      if (!k.startsWith("TETHER_") && !k.startsWith("XDG_")) env[k] = v;
    }
    Object.assign(env, {
      HOME: path.join(root, "home"),
      XDG_RUNTIME_DIR: path.join(root, "run"),
      XDG_DATA_HOME: path.join(root, "data"),
      XDG_CONFIG_HOME: path.join(root, "config"),
      XDG_STATE_HOME: path.join(root, "state"),
      XDG_CACHE_HOME: path.join(root, "cache"),
      TETHER_MODEL: "scripted",
      TETHER_BASE_URL: url,
      TETHER_LSP: "off",
      OPENAI_API_KEY: "",
      PYTHONUNBUFFERED: "1",
    });
    return new Home(root, workspace, env, model, url);
  }

  async setScript(script: object): Promise<void> {
    const answer = await fetch(`${this.modelUrl.replace(/\/v1$/, "")}/_tether/script`, {
      method: "POST",
      body: JSON.stringify(script),
    });
    if (!answer.ok) throw new Error(`setting the script: HTTP ${answer.status}: ${await answer.text()}`);
  }

  /** Let streams held by a step's `hold_at_chunks` go on past one more hold. */
  async release(): Promise<void> {
    const answer = await fetch(`${this.modelUrl.replace(/\/v1$/, "")}/_tether/release`, { method: "POST" });
    if (!answer.ok) throw new Error(`releasing the stream: HTTP ${answer.status}: ${await answer.text()}`);
  }

  /** A client of this home's daemon (started when none runs). */
  client(name = "other-client"): Promise<TetherClient> {
    return connect({ workspace: this.workspace, env: this.env, python: PYTHON, clientName: name });
  }

  /** A controller as the extension makes it, with a recording host. */
  controller(): { controller: SessionController; host: RecordingHost } {
    const host = new RecordingHost();
    const controller = new SessionController(this.workspace, host, () => this.client("vscode"));
    return { controller, host };
  }

  /** The CLI (`python -m tether.clients.cli.main`) in this home, from the workspace. */
  cli(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(PYTHON, ["-m", "tether.clients.cli.main", ...args], {
        env: this.env,
        cwd: this.workspace,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  /** Stop the workspace's daemon and the model server; remove it all. */
  async close(): Promise<void> {
    const file = path.join(this.env.XDG_RUNTIME_DIR!, "tether", `daemon-${workspaceKey(this.workspace)}.json`);
    const info = await readDiscovery(file).catch(() => null);
    if (info !== null) {
      try {
        process.kill(info.pid, "SIGTERM");
        while (alive(info.pid)) await new Promise((resolve) => setTimeout(resolve, 20));
      } catch {
        // already gone
      }
    }
    if (this.model.exitCode === null) {
      const exited = new Promise((resolve) => this.model.once("exit", resolve));
      this.model.kill("SIGTERM");
      await exited;
    }
    await rm(this.root, { recursive: true, force: true });
  }
}

/**
 * Running, not a zombie. The daemon the library started is not our child (the Python that
 * spawned it has exited): once it exits it waits for init to reap it, which may take a
 * while, and `kill(pid, 0)` succeeds on a zombie. So where there is a /proc, its state decides.
 */
function alive(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" && existsSync("/proc/self")) return false;
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
  return state !== "Z" && state !== "X";
}

/** A `Host` that records what it is asked and answers as told. */
export class RecordingHost implements Host {
  readonly posted: ViewState[] = [];
  readonly notices: Array<{ level: string; message: string }> = [];
  readonly diffs: Array<{ documents: DiffDocuments; title: string }> = [];
  readonly confirmations: string[] = [];
  editor: EditorContext | null = null;
  confirmAnswer = false;
  pick: (entries: PickerEntry[]) => string | null = () => null;
  #waiters: Array<{ check: (s: ViewState) => boolean; resolve: (s: ViewState) => void }> = [];

  post(message: ToWebview): void {
    this.posted.push(message.state);
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.check(message.state)) return true;
      w.resolve(message.state);
      return false;
    });
  }

  editorContext(): EditorContext | null {
    return this.editor;
  }

  async openDiff(documents: DiffDocuments, title: string): Promise<void> {
    this.diffs.push({ documents, title });
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
