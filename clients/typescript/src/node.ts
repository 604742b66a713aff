// Node's side of the library: finding (and starting) the workspace's daemon, and the
// websocket to it.
//
// Finding the daemon, each time a connection is made:
// 1. A discovery file given by the caller is used as it is (nothing is started).
// 2. Otherwise, when XDG_RUNTIME_DIR is set, its discovery file for the workspace is tried:
//    a daemon that accepts the file's token on the file's port is the live one (a dead
//    daemon's file names a port where nothing, or nothing holding that token, listens).
// 3. Otherwise, or when that fails, `python -P -m tether.clients.locate` decides, with the
//    same code as the CLI: the workspace lock says whether a daemon lives (Node cannot take
//    an `flock`), platformdirs where the runtime dir is, and it starts the daemon
//    (`python -P -m tether.daemon --workspace DIR`, detached) when none runs. Python runs
//    with -P (3.11+) both times: it starts in the workspace, whose folder `-m` would
//    otherwise put first on the module path, ahead of tether's own.
// The Python used is `python`, else $TETHER_PYTHON, else `python3`: one that can import
// tether, as the daemon it starts is run by it.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, realpathSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import process from "node:process";

import WebSocket from "ws";

import { TetherClient, type ClientOptions } from "./client.js";
import { ConnectionError, DiscoveryError } from "./errors.js";
import type { DiscoveryInfo } from "./protocol.js";
import type { Connector, Endpoint, Socket, SocketHandlers } from "./transport.js";

export interface LocateOptions {
  /** The workspace; default: the git root above the current directory, else that directory. */
  workspace?: string;
  /** Use this discovery file and nothing else (never starts a daemon). */
  discoveryFile?: string;
  /** Start a daemon when none runs (default true). */
  autostart?: boolean;
  /** The Python that runs tether (default $TETHER_PYTHON, else `python3`). */
  python?: string;
  /** The environment discovery and a started daemon see (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** `--idle-timeout` for a daemon this starts. */
  idleTimeout?: number;
}

export interface Located {
  info: DiscoveryInfo;
  /** Where the discovery file is. */
  file: string;
  /** Whether this call started the daemon. */
  started: boolean;
}

/** The workspace a client of `start` (default: the current directory) works in. */
export function resolveWorkspace(workspace?: string): string {
  if (workspace !== undefined) return realOrAbsolute(workspace);
  const here = realOrAbsolute(process.cwd());
  for (let folder = here; ; folder = path.dirname(folder)) {
    if (existsSync(path.join(folder, ".git"))) return folder;
    if (path.dirname(folder) === folder) return here;
  }
}

/** The key naming a workspace's discovery and lock files (`tether.protocol.discovery`). */
export function workspaceKey(resolvedWorkspace: string): string {
  return createHash("sha256").update(resolvedWorkspace, "utf8").digest("hex").slice(0, 16);
}

/** Read and check a discovery file. Rejects with a `DiscoveryError` coded NOT_FOUND or INVALID. */
export async function readDiscovery(file: string): Promise<DiscoveryInfo> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new DiscoveryError("NOT_FOUND", `no daemon discovery file at ${file}`, { cause: err });
  }
  return checkDiscovery(text, file);
}

/** The daemon serving the workspace, started when none runs and `autostart` allows. */
export async function locate(options: LocateOptions = {}): Promise<Located> {
  if (options.discoveryFile !== undefined) {
    return { info: await readDiscovery(options.discoveryFile), file: options.discoveryFile, started: false };
  }
  return locateWithPython(resolveWorkspace(options.workspace), options);
}

/**
 * A connector that finds the daemon afresh for every connection (so it follows a daemon
 * that restarted) and opens a websocket to it.
 */
export function daemonConnector(options: LocateOptions & { handshakeTimeout?: number } = {}): Connector {
  return async (handlers) => {
    if (options.discoveryFile === undefined) {
      const workspace = resolveWorkspace(options.workspace);
      const guess = guessDiscoveryFile(workspace, options.env ?? process.env);
      if (guess !== null) {
        const info = await readDiscovery(guess).catch(() => null);
        if (info !== null) {
          try {
            return await openSocket(endpointOf(info), handlers, options.handshakeTimeout);
          } catch {
            // A dead daemon's file, or one being replaced: the lock decides.
          }
        }
      }
      const located = await locateWithPython(workspace, options);
      return openSocket(endpointOf(located.info), handlers, options.handshakeTimeout);
    }
    const located = await locate(options);
    return openSocket(endpointOf(located.info), handlers, options.handshakeTimeout);
  };
}

export interface ConnectOptions extends LocateOptions, Omit<ClientOptions, "connector"> {
  /** Open sockets some other way (the default finds the daemon and uses `ws`). */
  connector?: Connector;
  /** Milliseconds the websocket handshake may take (default 10000). */
  handshakeTimeout?: number;
}

/**
 * Find the workspace's daemon (starting it when none runs), connect and initialize.
 * The client reconnects on its own, finding the daemon again each time.
 */
export function connect(options: ConnectOptions = {}): Promise<TetherClient> {
  return TetherClient.connect({ ...options, connector: options.connector ?? daemonConnector(options) });
}

/** A `ws` websocket as a `Socket`, with `terminate` to drop it as a network failure would. */
export class NodeSocket implements Socket {
  constructor(readonly ws: WebSocket) {}

  send(text: string): void {
    this.ws.send(text);
  }

  close(): void {
    this.ws.close(1000);
  }

  /** Destroy the TCP connection without a close handshake. */
  terminate(): void {
    this.ws.terminate();
  }
}

/**
 * Open a websocket to `endpoint` with its token; resolves once the handshake succeeded and
 * only then wires `handlers`. Rejects with a `ConnectionError` coded ECONNREFUSED (or
 * another system code), UNAUTHORIZED (the token was refused), FORBIDDEN (a Host or Origin
 * the daemon refuses), HANDSHAKE, TIMEOUT or CLOSED.
 */
export function openSocket(endpoint: Endpoint, handlers: SocketHandlers, timeout = 10000): Promise<NodeSocket> {
  const url = `ws://${endpoint.host}:${endpoint.port}/`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${endpoint.token}` },
      handshakeTimeout: timeout,
      perMessageDeflate: false,
      maxPayload: 256 * 1024 * 1024,
    });
    let settled = false;
    const fail = (error: ConnectionError): void => {
      if (settled) return;
      settled = true;
      ws.removeAllListeners();
      ws.on("error", () => {});
      ws.terminate();
      reject(error);
    };
    ws.on("unexpected-response", (_request, response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () => {
        const status = response.statusCode ?? 0;
        const said = `HTTP ${status}${body.trim() ? `: ${body.trim()}` : ""}`;
        if (status === 401) fail(new ConnectionError("UNAUTHORIZED", `the daemon at ${url} rejected the token (${said})`));
        else if (status === 403) fail(new ConnectionError("FORBIDDEN", `the daemon at ${url} refused the connection (${said})`));
        else fail(new ConnectionError("HANDSHAKE", `unexpected answer from ${url} (${said})`));
      });
    });
    ws.on("error", (err: NodeJS.ErrnoException) => {
      const code = err.code ?? (/timed out/i.test(err.message) ? "TIMEOUT" : "HANDSHAKE");
      fail(new ConnectionError(code, `cannot connect to ${url}: ${err.message}`, { cause: err }));
    });
    ws.on("close", () => fail(new ConnectionError("CLOSED", `connection to ${url} closed during the handshake`)));
    ws.on("open", () => {
      if (settled) return;
      settled = true;
      ws.removeAllListeners();
      ws.on("message", (data, isBinary) => {
        if (!isBinary) handlers.message(rawText(data));
      });
      ws.on("error", () => {}); // "close" follows
      ws.on("close", (code, reason) => handlers.closed({ code, reason: reason.toString("utf8") }));
      resolve(new NodeSocket(ws));
    });
  });
}

function rawText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString("utf8");
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString("utf8");
  return data.toString("utf8");
}

function endpointOf(info: DiscoveryInfo): Endpoint {
  return { host: "127.0.0.1", port: info.port, token: info.token };
}

function guessDiscoveryFile(workspace: string, env: NodeJS.ProcessEnv): string | null {
  const runtime = env.XDG_RUNTIME_DIR;
  if (!runtime) return null;
  return path.join(runtime, "tether", `daemon-${workspaceKey(workspace)}.json`);
}

function locateWithPython(workspace: string, options: LocateOptions): Promise<Located> {
  const env = options.env ?? process.env;
  const python = options.python ?? env.TETHER_PYTHON ?? "python3";
  const args = ["-P", "-m", "tether.clients.locate", "--workspace", workspace];
  if (options.autostart === false) args.push("--no-start");
  if (options.idleTimeout !== undefined) args.push("--idle-timeout", String(options.idleTimeout));
  return new Promise((resolve, reject) => {
    const child = spawn(python, args, { env, stdio: ["ignore", "pipe", "pipe"], cwd: workspace });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    child.on("error", (err) =>
      reject(new DiscoveryError("NO_PYTHON", `cannot run ${python} to find the daemon: ${err.message}`, { cause: err })),
    );
    child.on("close", (code) => {
      const said = stderr.trim().split("\n").at(-1) ?? "";
      if (stderr.includes("Unknown option: -P")) {
        reject(new DiscoveryError("UNAVAILABLE", `${python} is older than Python 3.11, which tether needs`));
      } else if (code === 2) {
        reject(new DiscoveryError("NOT_RUNNING", said || `no daemon is running for ${workspace}`));
      } else if (code !== 0) {
        reject(new DiscoveryError("UNAVAILABLE", said || `${python} could not find the daemon (exit ${code})`));
      } else {
        try {
          const answer = JSON.parse(stdout) as { discovery: unknown; started: boolean; discoveryFile: string };
          const info = checkDiscovery(JSON.stringify(answer.discovery), answer.discoveryFile);
          resolve({ info, file: answer.discoveryFile, started: answer.started });
        } catch (err) {
          reject(err instanceof DiscoveryError ? err : new DiscoveryError("INVALID", `${python} said: ${stdout.slice(0, 200)}`));
        }
      }
    });
  });
}

const DISCOVERY_FIELDS: ReadonlyArray<[keyof DiscoveryInfo, string]> = [
  ["pid", "number"],
  ["port", "number"],
  ["token", "string"],
  ["protocolVersion", "number"],
  ["daemonVersion", "string"],
  ["workspace", "string"],
  ["startedAt", "number"],
];

function checkDiscovery(text: string, file: string): DiscoveryInfo {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new DiscoveryError("INVALID", `discovery file ${file} is not JSON`, { cause: err });
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new DiscoveryError("INVALID", `discovery file ${file} is not a JSON object`);
  }
  const info = value as Record<string, unknown>;
  for (const [field, type] of DISCOVERY_FIELDS) {
    if (typeof info[field] !== type) {
      throw new DiscoveryError("INVALID", `discovery file ${file}: "${field}" must be a ${type}`);
    }
  }
  const port = info.port as number;
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new DiscoveryError("INVALID", `discovery file ${file}: bad port ${port}`);
  }
  return value as DiscoveryInfo;
}

function realOrAbsolute(p: string): string {
  const absolute = path.resolve(p);
  try {
    return realpathSync(absolute);
  } catch {
    return absolute;
  }
}
