// For the end-to-end tests of this library and of clients built on it (`tether-client/testing`):
// an isolated user (HOME and XDG folders in a temporary directory), the scripted model server
// as a subprocess, the CLI, and stopping the daemons the library started.

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, mkdir, readFile, realpath, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import process from "node:process";

import WebSocket from "ws";

import { readDiscovery, workspaceKey, type WebSocketLike } from "./index.js";

export const PYTHON = process.env.TETHER_PYTHON ?? "python3";

/** A scripted model server (`python -P -m tether.testing`) on a free port. */
export class ModelServer {
  private constructor(
    readonly child: ChildProcess,
    readonly url: string,
  ) {}

  static async start(dir: string, script: object): Promise<ModelServer> {
    const scriptFile = path.join(dir, "script.json");
    const portFile = path.join(dir, "model.port");
    await writeFile(scriptFile, JSON.stringify(script));
    const child = spawn(PYTHON, ["-P", "-m", "tether.testing", "--script", scriptFile, "--port-file", portFile], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    // It prints its URL once it listens (after writing the port file).
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        const match = /listening on (http:\/\/\S+)/.exec(out);
        if (match?.[1]) resolve(match[1]);
      });
      child.on("exit", (code) => reject(new Error(`model server exited with ${code}`)));
    });
    return new ModelServer(child, url);
  }

  /** Let streams held by a step's `hold_at_chunks` go on past one more hold. */
  async release(): Promise<void> {
    const answer = await fetch(`${this.url.replace(/\/v1$/, "")}/_tether/release`, { method: "POST" });
    if (!answer.ok) throw new Error(`releasing the stream: HTTP ${answer.status}: ${await answer.text()}`);
  }

  async setScript(script: object): Promise<void> {
    const base = this.url.replace(/\/v1$/, "");
    const answer = await fetch(`${base}/_tether/script`, { method: "POST", body: JSON.stringify(script) });
    if (!answer.ok) throw new Error(`setting the script: HTTP ${answer.status}: ${await answer.text()}`);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGTERM");
    // A connection the server still holds open (a kept-alive fetch) can hold its stop: the
    // server is a test's, so after a grace period it is killed.
    const killer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(killer);
  }
}

/** An isolated user with one workspace, and the model server its daemons use. */
export class Home {
  private constructor(
    readonly root: string,
    readonly workspace: string,
    readonly env: NodeJS.ProcessEnv,
    readonly model: ModelServer,
  ) {}

  static async create(script: object = { steps: [{ text: "hello" }] }): Promise<Home> {
    const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "tether-ts-")));
    const workspace = path.join(root, "workspace");
    await mkdir(path.join(workspace, ".git"), { recursive: true });
    await writeFile(path.join(workspace, "README.md"), "# Demo project\nIt greets.\n");
    const runtime = path.join(root, "run");
    await mkdir(runtime, { mode: 0o700 });
    const model = await ModelServer.start(root, script);
    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) {
      if (!k.startsWith("TETHER_") && !k.startsWith("XDG_")) env[k] = v;
    }
    Object.assign(env, {
      HOME: path.join(root, "home"),
      XDG_RUNTIME_DIR: runtime,
      XDG_DATA_HOME: path.join(root, "data"),
      XDG_CONFIG_HOME: path.join(root, "config"),
      XDG_STATE_HOME: path.join(root, "state"),
      XDG_CACHE_HOME: path.join(root, "cache"),
      TETHER_MODEL: "scripted",
      TETHER_BASE_URL: model.url,
      TETHER_LSP: "off",
      OPENAI_API_KEY: "",
      PYTHONUNBUFFERED: "1",
    });
    return new Home(root, workspace, env, model);
  }

  get discoveryFile(): string {
    return path.join(this.env.XDG_RUNTIME_DIR!, "tether", `daemon-${workspaceKey(this.workspace)}.json`);
  }

  /** The library's options for this home. */
  options(): { workspace: string; env: NodeJS.ProcessEnv; python: string } {
    return { workspace: this.workspace, env: this.env, python: PYTHON };
  }

  /** Start the daemon ourselves, with extra flags; resolves once its discovery file names it. */
  async startDaemon(...extra: string[]): Promise<ChildProcess> {
    const log = path.join(this.root, "daemon.log");
    const child = spawn(PYTHON, ["-P", "-m", "tether.daemon", "--workspace", this.workspace, ...extra], {
      env: this.env,
      stdio: ["ignore", "ignore", "ignore"],
    });
    for (;;) {
      const info = await readDiscovery(this.discoveryFile).catch(() => null);
      if (info !== null && info.pid === child.pid) return child;
      if (child.exitCode !== null) throw new Error(`the daemon exited with ${child.exitCode}; see ${log}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** The CLI (`python -P -m tether.clients.cli.main`) in this home. */
  cli(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(PYTHON, ["-P", "-m", "tether.clients.cli.main", ...args], {
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

  /** Stop the workspace's daemon (whoever started it) and the model server; remove it all. */
  async close(): Promise<void> {
    const info = await readDiscovery(this.discoveryFile).catch(() => null);
    if (info !== null) {
      try {
        process.kill(info.pid, "SIGTERM");
        // Not our child (the library started it detached): watch the pid go.
        while (alive(info.pid)) await new Promise((resolve) => setTimeout(resolve, 20));
      } catch {
        // already gone
      }
    }
    await this.model.stop();
    await rm(this.root, { recursive: true, force: true });
  }

  async log(): Promise<string> {
    const file = path.join(this.root, "state", "tether", "log", `daemon-${workspaceKey(this.workspace)}.log`);
    return readFile(file, "utf8").catch(() => "");
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

/**
 * What `webSocketConnector` makes its sockets with, for a test in Node: `ws`'s WebSocket (the
 * browser's API) sending the daemon's `token`, as `tether web`'s relay does for a page. Each
 * socket opened is pushed to `opened` (a test terminates one to drop the connection).
 */
export function tokenWebSocket(token: string, opened: WebSocket[] = []): (url: string) => WebSocketLike {
  return (url) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
    ws.on("error", () => {}); // a refused or dropped socket closes, which the connector reports
    opened.push(ws);
    return ws as unknown as WebSocketLike;
  };
}
