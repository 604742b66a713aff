#!/usr/bin/env node
// A Node.js client for the tether daemon: a small library plus a one-shot CLI.
//
// Written against the published protocol schema
// (packaging/schema/tether-protocol.schema.json): JSON-RPC 2.0 over a loopback websocket,
// one message per text frame, bearer-token auth, `initialize` first.
//
// Library:
//   import { findDiscovery, TetherClient } from './tether-client.mjs';
//   const discovery = await findDiscovery({ workspace: '/path/to/repo' });
//   const client = await TetherClient.connect(discovery, { clientName: 'my-editor' });
//   client.on('event', (params) => { ... });       // session/event notification params
//   const { session } = await client.request('session/create', { title: 'demo' });
//
// CLI: run with --help.

import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { readFile, realpath } from 'node:fs/promises';
import { realpathSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import WebSocket from 'ws';

/** The wire protocol revision this client speaks. */
export const PROTOCOL_VERSION = 1;

/** This client's own version, sent as `clientVersion`. */
export const CLIENT_VERSION = '0.1.0';

/** JSON-RPC error codes the daemon uses (from the schema's `errors` table). */
export const ErrorCode = Object.freeze({
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  NOT_INITIALIZED: -32002,
  ALREADY_INITIALIZED: -32003,
  UNSUPPORTED_PROTOCOL: -32004,
  SESSION_NOT_FOUND: -32010,
  NOT_ATTACHED: -32012,
  NOT_CONTROLLER: -32013,
  NO_RUNNING_TURN: -32014,
  SHUTTING_DOWN: -32030,
});

// ------------------------------------------------------------------------------------------
// Types (JSDoc only; field names are exactly the wire's camelCase names)

/**
 * Contents of the daemon's discovery file (`DiscoveryInfo` in the schema).
 * @typedef {object} DiscoveryInfo
 * @property {number} pid
 * @property {number} port
 * @property {string} token
 * @property {number} protocolVersion
 * @property {string} daemonVersion
 * @property {string} workspace
 * @property {number} startedAt
 * @property {string} [path] Where the file was read from (added by `findDiscovery`).
 */

/**
 * @typedef {object} InitializeResult
 * @property {number} protocolVersion
 * @property {string} daemonVersion
 * @property {string} workspace
 * @property {number} pid
 */

/**
 * An item of a turn. `type` decides which other fields are present.
 * @typedef {object} Item
 * @property {'user_message'|'agent_message'|'reasoning'|'tool_call'|'notice'} type
 * @property {string} id
 * @property {string} [text]       user_message, agent_message, reasoning
 * @property {boolean} [superseded] agent_message, reasoning: replaced by a retried model call
 * @property {string} [callId]     tool_call
 * @property {string} [tool]       tool_call
 * @property {string} [arguments]  tool_call: raw JSON text produced by the model
 * @property {'running'|'completed'|'failed'|'cancelled'} [status]  tool_call
 * @property {string} [output]     tool_call
 * @property {'info'|'warning'|'error'} [level]  notice
 * @property {string} [code]       notice
 * @property {string} [message]    notice
 */

/**
 * One session event. `type` decides which other fields are present.
 * @typedef {object} SessionEvent
 * @property {'turn_started'|'item_started'|'item_delta'|'item_completed'|'turn_completed'|'session_renamed'} type
 * @property {string} [turnId]     every type except session_renamed
 * @property {Item} [item]         item_started, item_completed
 * @property {string} [itemId]     item_delta
 * @property {string} [delta]      item_delta
 * @property {string} [status]     turn_completed: completed|failed|cancelled|interrupted|paused
 * @property {{code: string, message: string} | null} [error]  turn_completed
 * @property {{inputTokens?: number, outputTokens?: number}} [usage]  turn_completed
 * @property {number} [startedAt]  turn_started
 * @property {number} [endedAt]    turn_completed
 * @property {string} [title]      session_renamed
 */

/**
 * Params of a `session/event` notification.
 * @typedef {object} SessionEventParams
 * @property {string} sessionId
 * @property {string} epoch
 * @property {number} seq
 * @property {SessionEvent} event
 */

/**
 * Params of a `session/resync` notification.
 * @typedef {object} SessionResyncParams
 * @property {string} sessionId
 * @property {string} reason
 */

// ------------------------------------------------------------------------------------------
// Errors

/** A JSON-RPC error response. `code` is the numeric JSON-RPC code (see `ErrorCode`). */
export class RpcError extends Error {
  /**
   * @param {number} code
   * @param {string} message
   * @param {unknown} [data]
   * @param {string} [method] The method of the request that failed.
   */
  constructor(code, message, data, method) {
    super(method ? `${method}: ${message} (code ${code})` : `${message} (code ${code})`);
    this.name = 'RpcError';
    /** @type {number} */
    this.code = code;
    /** @type {unknown} */
    this.data = data;
    /** @type {string | undefined} */
    this.method = method;
    /** The daemon's message, without the method and code decoration. */
    this.rpcMessage = message;
  }
}

/**
 * The daemon could not be reached, rejected the connection, or the connection dropped.
 * `code` is a string such as 'ECONNREFUSED', 'UNAUTHORIZED', 'CLOSED', 'HANDSHAKE'.
 */
export class ConnectionError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(code, message, options) {
    super(message, options);
    this.name = 'ConnectionError';
    /** @type {string} */
    this.code = code;
  }
}

/**
 * The discovery file could not be located or read.
 * `code` is 'NO_RUNTIME_DIR', 'NOT_FOUND', 'UNREADABLE' or 'INVALID'.
 */
export class DiscoveryError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(code, message, options) {
    super(message, options);
    this.name = 'DiscoveryError';
    /** @type {string} */
    this.code = code;
  }
}

// ------------------------------------------------------------------------------------------
// Discovery

/**
 * The key the daemon uses to name its discovery file: the first 16 hex digits of the
 * SHA-256 of the absolute, resolved workspace path (UTF-8).
 * @param {string} resolvedWorkspace
 * @returns {string}
 */
export function workspaceKey(resolvedWorkspace) {
  return createHash('sha256').update(resolvedWorkspace, 'utf8').digest('hex').slice(0, 16);
}

/**
 * Resolve a workspace path the way the daemon does: absolute, symlinks followed.
 * A path that does not exist is only made absolute.
 * @param {string} workspace
 * @returns {Promise<string>}
 */
export async function resolveWorkspace(workspace) {
  const absolute = path.resolve(workspace);
  try {
    return await realpath(absolute);
  } catch {
    return absolute;
  }
}

/**
 * The default discovery file path for a resolved workspace:
 * `$XDG_RUNTIME_DIR/tether/daemon-<key>.json`. Throws a `DiscoveryError` when
 * `XDG_RUNTIME_DIR` is not set, since the fallback location is platform specific.
 * @param {string} resolvedWorkspace
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {string}
 */
export function defaultDiscoveryPath(resolvedWorkspace, env = process.env) {
  const runtimeDir = env.XDG_RUNTIME_DIR;
  if (!runtimeDir) {
    throw new DiscoveryError(
      'NO_RUNTIME_DIR',
      'XDG_RUNTIME_DIR is not set, so the daemon discovery file cannot be located; ' +
        'pass --discovery-file PATH or set TETHER_DISCOVERY_FILE',
    );
  }
  return path.join(runtimeDir, 'tether', `daemon-${workspaceKey(resolvedWorkspace)}.json`);
}

/** @type {Array<[keyof DiscoveryInfo, string]>} */
const DISCOVERY_FIELDS = [
  ['pid', 'number'],
  ['port', 'number'],
  ['token', 'string'],
  ['protocolVersion', 'number'],
  ['daemonVersion', 'string'],
  ['workspace', 'string'],
  ['startedAt', 'number'],
];

/**
 * Find and read the discovery file of the daemon serving a workspace.
 *
 * Lookup order: `discoveryFile`, then `$TETHER_DISCOVERY_FILE`, then
 * `$XDG_RUNTIME_DIR/tether/daemon-<key>.json` for `workspace` (default: the current directory).
 *
 * @param {object} [options]
 * @param {string} [options.workspace]
 * @param {string} [options.discoveryFile]
 * @param {NodeJS.ProcessEnv} [options.env]
 * @returns {Promise<DiscoveryInfo>}
 */
export async function findDiscovery({ workspace, discoveryFile, env = process.env } = {}) {
  let file = discoveryFile || env.TETHER_DISCOVERY_FILE;
  if (!file) {
    file = defaultDiscoveryPath(await resolveWorkspace(workspace ?? process.cwd()), env);
  }
  let text;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = /** @type {NodeJS.ErrnoException} */ (err).code;
    if (code === 'ENOENT') {
      throw new DiscoveryError(
        'NOT_FOUND',
        `no daemon discovery file at ${file}; is the tether daemon running for this workspace?`,
        { cause: err },
      );
    }
    throw new DiscoveryError('UNREADABLE', `cannot read discovery file ${file}: ${err}`, {
      cause: err,
    });
  }
  let info;
  try {
    info = JSON.parse(text);
  } catch (err) {
    throw new DiscoveryError('INVALID', `discovery file ${file} is not valid JSON`, { cause: err });
  }
  if (info === null || typeof info !== 'object' || Array.isArray(info)) {
    throw new DiscoveryError('INVALID', `discovery file ${file} is not a JSON object`);
  }
  for (const [field, type] of DISCOVERY_FIELDS) {
    if (typeof info[field] !== type) {
      throw new DiscoveryError('INVALID', `discovery file ${file}: "${field}" must be a ${type}`);
    }
  }
  if (!Number.isInteger(info.port) || info.port <= 0 || info.port > 65535) {
    throw new DiscoveryError('INVALID', `discovery file ${file}: bad port ${info.port}`);
  }
  return { ...info, path: file };
}

/**
 * Whether a process id is alive (best effort; used only to explain connection failures).
 * @param {number} pid
 */
function processAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return /** @type {NodeJS.ErrnoException} */ (err).code === 'EPERM';
  }
}

// ------------------------------------------------------------------------------------------
// Client

/**
 * @typedef {object} ConnectOptions
 * @property {string} [clientName]        Sent in `initialize` (default 'tether-node').
 * @property {string} [clientVersion]     Sent in `initialize` (default this module's version).
 * @property {number} [protocolVersion]   Sent in `initialize` (default PROTOCOL_VERSION).
 * @property {string} [host]              Default '127.0.0.1'.
 * @property {number} [handshakeTimeoutMs] Default 10000.
 */

/**
 * One authenticated, initialized connection to a tether daemon.
 *
 * Events (EventEmitter):
 * - 'event'   (params: SessionEventParams)     a `session/event` notification
 * - 'resync'  (params: SessionResyncParams)    a `session/resync` notification
 * - 'notification' (method: string, params)    every notification, including the two above
 * - 'warning' (err: Error)                      a frame that could not be understood
 * - 'close'   ({code: number, reason: string})  the connection ended
 *
 * The 'error' event is never emitted, so an unhandled one cannot crash the process.
 */
export class TetherClient extends EventEmitter {
  /** @type {WebSocket} */
  #ws;
  #nextId = 0;
  /** @type {Map<string, {method: string, resolve: (v: any) => void, reject: (e: Error) => void}>} */
  #pending = new Map();
  #closed = false;
  /** @type {Promise<void>} */
  #closedPromise;

  /**
   * Use `TetherClient.connect`; the constructor only wraps an already open socket.
   * @param {WebSocket} ws
   */
  constructor(ws) {
    super();
    this.#ws = ws;
    /** @type {InitializeResult | null} The daemon's answer to `initialize`. */
    this.serverInfo = null;
    this.#closedPromise = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.#closed = true;
        const err = new ConnectionError(
          'CLOSED',
          `connection to the daemon closed (code ${code}${reason.length ? `: ${reason}` : ''})`,
        );
        for (const entry of this.#pending.values()) entry.reject(err);
        this.#pending.clear();
        this.emit('close', { code, reason: reason.toString('utf8') });
        resolve();
      });
    });
    ws.on('error', (err) => {
      // 'close' follows; pending requests are rejected there.
      this.emit('warning', err);
    });
    ws.on('message', (data, isBinary) => this.#onMessage(data, isBinary));
  }

  /**
   * Open a websocket to the daemon described by `discovery`, authenticate with its token and
   * send `initialize`. Rejects with a `ConnectionError` (cannot connect, token rejected) or an
   * `RpcError` (the daemon refused `initialize`, e.g. UNSUPPORTED_PROTOCOL).
   *
   * @param {Pick<DiscoveryInfo, 'port' | 'token'> & Partial<DiscoveryInfo>} discovery
   * @param {ConnectOptions} [options]
   * @returns {Promise<TetherClient>}
   */
  static async connect(discovery, options = {}) {
    const {
      clientName = 'tether-node',
      clientVersion = CLIENT_VERSION,
      protocolVersion = PROTOCOL_VERSION,
      host = '127.0.0.1',
      handshakeTimeoutMs = 10000,
    } = options;
    const url = `ws://${host}:${discovery.port}/`;
    const ws = await openSocket(url, discovery, handshakeTimeoutMs);
    const client = new TetherClient(ws);
    try {
      client.serverInfo = await client.request('initialize', {
        clientName,
        clientVersion,
        protocolVersion,
      });
    } catch (err) {
      await client.close();
      throw err;
    }
    return client;
  }

  /** Whether the connection has ended. */
  get closed() {
    return this.#closed;
  }

  /**
   * Send a request and wait for its response.
   * Resolves with `result`; rejects with an `RpcError` (carrying `.code`) on an error response,
   * or a `ConnectionError` when the connection is or becomes closed.
   * @param {string} method
   * @param {object} [params]
   * @returns {Promise<any>}
   */
  request(method, params = {}) {
    if (this.#closed || this.#ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new ConnectionError('CLOSED', `cannot send ${method}: not connected`));
    }
    const id = String(++this.#nextId);
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { method, resolve, reject });
      this.#ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }), (err) => {
        if (err && this.#pending.delete(id)) {
          reject(new ConnectionError('CLOSED', `cannot send ${method}: ${err.message}`, { cause: err }));
        }
      });
    });
  }

  /**
   * Close the connection. Resolves once it is closed (forcibly after `timeoutMs`).
   * @param {number} [timeoutMs]
   * @returns {Promise<void>}
   */
  close(timeoutMs = 2000) {
    if (!this.#closed) {
      if (this.#ws.readyState === WebSocket.OPEN || this.#ws.readyState === WebSocket.CONNECTING) {
        this.#ws.close(1000);
      }
      const timer = setTimeout(() => this.#ws.terminate(), timeoutMs);
      timer.unref();
      this.#closedPromise.then(() => clearTimeout(timer));
    }
    return this.#closedPromise;
  }

  /**
   * @param {WebSocket.RawData} data
   * @param {boolean} isBinary
   */
  #onMessage(data, isBinary) {
    if (isBinary) {
      this.emit('warning', new Error('ignoring a binary frame (the protocol uses text frames)'));
      return;
    }
    let msg;
    try {
      msg = JSON.parse(data.toString());
    } catch (err) {
      this.emit('warning', new Error(`ignoring a frame that is not JSON: ${err}`));
      return;
    }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
      this.emit('warning', new Error('ignoring a frame that is not a JSON-RPC object'));
      return;
    }
    if (typeof msg.method === 'string') {
      if (msg.id !== undefined && msg.id !== null) {
        // The daemon sends no requests today; answer politely rather than leave it waiting.
        this.#ws.send(
          JSON.stringify({
            jsonrpc: '2.0',
            id: msg.id,
            error: { code: ErrorCode.METHOD_NOT_FOUND, message: `client does not handle ${msg.method}` },
          }),
        );
        return;
      }
      this.emit('notification', msg.method, msg.params);
      if (msg.method === 'session/event') this.emit('event', msg.params);
      else if (msg.method === 'session/resync') this.emit('resync', msg.params);
      return;
    }
    const id = msg.id === undefined || msg.id === null ? null : String(msg.id);
    const entry = id === null ? undefined : this.#pending.get(id);
    if (!entry) {
      const what = msg.error ? `error response: ${JSON.stringify(msg.error)}` : 'response';
      this.emit('warning', new Error(`unmatched ${what} (id ${JSON.stringify(msg.id)})`));
      return;
    }
    this.#pending.delete(/** @type {string} */ (id));
    if (msg.error && typeof msg.error === 'object') {
      const { code, message, data: errData } = msg.error;
      entry.reject(new RpcError(code, String(message ?? 'error'), errData, entry.method));
    } else {
      entry.resolve(msg.result);
    }
  }
}

/**
 * Open the websocket, translating failures into `ConnectionError`s a person can act on.
 * @param {string} url
 * @param {Partial<DiscoveryInfo>} discovery
 * @param {number} handshakeTimeoutMs
 * @returns {Promise<WebSocket>}
 */
function openSocket(url, discovery, handshakeTimeoutMs) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${discovery.token}` },
      handshakeTimeout: handshakeTimeoutMs,
      perMessageDeflate: false,
      followRedirects: false,
    });
    let settled = false;
    /** @param {Error} err */
    const fail = (err) => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    const onOpen = () => {
      if (settled) return;
      settled = true;
      ws.off('error', onError);
      ws.off('close', onClose);
      ws.off('unexpected-response', onUnexpectedResponse);
      resolve(ws);
    };
    /** @param {import('node:http').ClientRequest} _req @param {import('node:http').IncomingMessage} res */
    const onUnexpectedResponse = (_req, res) => {
      const status = res.statusCode ?? 0;
      let body = '';
      const report = () => {
        const reason = body.trim().slice(0, 300);
        const because = reason ? `: ${reason}` : '';
        let err;
        if (status === 401) {
          err = new ConnectionError(
            'UNAUTHORIZED',
            `the daemon at ${url} rejected the token (HTTP 401${because}); ` +
              'the discovery file may be stale or belong to another daemon',
          );
        } else if (status === 403) {
          err = new ConnectionError('FORBIDDEN', `the daemon at ${url} refused the connection (HTTP 403${because})`);
        } else {
          err = new ConnectionError('HANDSHAKE', `unexpected HTTP ${status} from ${url}${because} (is this a tether daemon?)`);
        }
        fail(err);
        ws.terminate();
      };
      // Read the (short) reason the daemon gives, but do not wait long for it.
      const timer = setTimeout(report, 1000);
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        if (body.length < 1000) body += chunk;
      });
      res.on('end', () => {
        clearTimeout(timer);
        report();
      });
      res.on('error', () => {
        clearTimeout(timer);
        report();
      });
    };
    /** @param {Error} err */
    const onError = (err) => {
      const code = /** @type {NodeJS.ErrnoException} */ (err).code ?? 'HANDSHAKE';
      let hint = '';
      if (code === 'ECONNREFUSED' && typeof discovery.pid === 'number') {
        hint = processAlive(discovery.pid)
          ? ` (daemon pid ${discovery.pid} is alive but not listening there)`
          : ` (daemon pid ${discovery.pid} is not running: stale discovery file?)`;
      }
      fail(new ConnectionError(code, `cannot connect to ${url}: ${err.message}${hint}`, { cause: err }));
    };
    const onClose = () => fail(new ConnectionError('CLOSED', `connection to ${url} closed during handshake`));
    ws.on('open', onOpen);
    ws.on('unexpected-response', onUnexpectedResponse);
    ws.on('error', onError);
    ws.on('close', onClose);
  });
}

// ------------------------------------------------------------------------------------------
// CLI

const USAGE = `usage: tether-node --prompt TEXT [--workspace DIR] [--discovery-file PATH]
                   [--session ID] [--title TEXT] [--json]

Run one turn on the tether daemon serving a workspace and stream its events.

  --prompt TEXT          the message to send (required)
  --workspace DIR        workspace whose daemon to use (default: current directory)
  --discovery-file PATH  daemon discovery file (default: $TETHER_DISCOVERY_FILE, else
                         $XDG_RUNTIME_DIR/tether/daemon-<key>.json for the workspace)
  --session ID           use an existing session instead of creating one
  --title TEXT           title for a new session
  --json                 print each session/event params object as one JSON line
  -h, --help             show this help

Exit status: 0 turn completed, 1 turn not completed or protocol error,
2 usage, discovery or connection error. Ctrl-C cancels the turn; twice quits.`;

/**
 * @typedef {object} CliIO
 * @property {(s: string) => void} out
 * @property {(s: string) => void} err
 * @property {NodeJS.ProcessEnv} env
 * @property {(onSignal: () => void) => () => void} [onInterrupt]  subscribe to Ctrl-C; returns an unsubscribe
 */

class UsageError extends Error {}

/** A failure that ends the CLI with a given exit status. */
class Exit extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Terminal turn statuses (anything but `running`). */
const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'interrupted', 'paused']);

/**
 * Run the CLI. Resolves with the exit status; never calls `process.exit`.
 * @param {string[]} argv  arguments after the script name
 * @param {CliIO} io
 * @returns {Promise<number>}
 */
export async function runCli(argv, io) {
  let opts;
  try {
    opts = parseCliArgs(argv);
  } catch (err) {
    io.err(`tether-node: ${err instanceof Error ? err.message : err}\n${USAGE}\n`);
    return 2;
  }
  if (opts.help) {
    io.out(`${USAGE}\n`);
    return 0;
  }

  let client;
  try {
    const discovery = await findDiscovery({
      workspace: opts.workspace,
      discoveryFile: opts.discoveryFile,
      env: io.env,
    });
    client = await TetherClient.connect(discovery, { clientName: 'tether-node' });
  } catch (err) {
    io.err(`tether-node: ${err instanceof Error ? err.message : err}\n`);
    return 2;
  }

  try {
    return await runTurn(client, opts, io);
  } finally {
    await client.close();
  }
}

/**
 * @param {string[]} argv
 */
function parseCliArgs(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      workspace: { type: 'string' },
      'discovery-file': { type: 'string' },
      session: { type: 'string' },
      prompt: { type: 'string' },
      title: { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (positionals.length) throw new UsageError(`unexpected argument: ${positionals[0]}`);
  if (!values.help && !values.prompt) throw new UsageError('--prompt TEXT is required');
  return {
    workspace: values.workspace,
    discoveryFile: values['discovery-file'],
    session: values.session,
    prompt: values.prompt ?? '',
    title: values.title ?? '',
    json: Boolean(values.json),
    help: Boolean(values.help),
  };
}

/**
 * Create/attach a session, start the turn and follow its events until it ends.
 * @param {TetherClient} client
 * @param {ReturnType<typeof parseCliArgs>} opts
 * @param {CliIO} io
 * @returns {Promise<number>}
 */
async function runTurn(client, opts, io) {
  const printer = opts.json ? new JsonPrinter(io) : new HumanPrinter(io);

  let done = false;
  /** @type {(status: number) => void} */
  let resolveFinished = () => {};
  /** @type {Promise<number>} */
  const finished = new Promise((resolve) => {
    resolveFinished = resolve;
  });
  /** @param {number} status */
  const finish = (status) => {
    if (done) return;
    done = true;
    resolveFinished(status);
  };
  /** @param {number} status @param {string} message */
  const fail = (status, message) => {
    if (done) return;
    printer.endLine();
    io.err(`tether-node: ${message}\n`);
    finish(status);
  };
  /** Our turn ended. @param {string} status @param {{code: string, message: string} | null | undefined} error */
  const turnEnded = (status, error) => {
    printer.endLine();
    if (status === 'completed') finish(0);
    else fail(1, `turn ${status}${error ? `: ${error.message} [${error.code}]` : ''}`);
  };

  let sessionId = opts.session ?? '';
  /** Last event seen: null while an attach is in flight (events are held until it answers). */
  /** @type {{epoch: string, seq: number} | null} */
  let cursor = null;
  /** The cursor to re-attach from after a resync. */
  /** @type {{epoch: string, seq: number} | null} */
  let lastCursor = null;
  /** @type {SessionEventParams[]} events received while an attach was in flight */
  let held = [];
  /** @type {string | null} */
  let turnId = null;
  /** @type {SessionEventParams[]} events received before our turn id was known */
  let early = [];

  /** @param {SessionEventParams} params */
  const deliver = (params) => {
    const ev = params.event;
    if (turnId === null) {
      early.push(params);
      return;
    }
    if (ev.turnId !== undefined && ev.turnId !== turnId) return;
    printer.event(params);
    if (ev.type === 'turn_completed') turnEnded(ev.status ?? 'unknown', ev.error);
  };

  /** Check continuity, then pass the event on. @param {SessionEventParams} params */
  const accept = (params) => {
    if (done) return;
    if (cursor === null) {
      held.push(params);
      return;
    }
    if (params.epoch !== cursor.epoch) {
      fail(1, `event seq ${params.seq} is in epoch ${params.epoch}, expected epoch ${cursor.epoch}`);
      return;
    }
    if (params.seq !== cursor.seq + 1) {
      const kind = params.seq > cursor.seq + 1 ? 'gap' : 'repeat';
      fail(1, `event seq ${kind}: expected seq ${cursor.seq + 1}, got ${params.seq} (epoch ${cursor.epoch})`);
      return;
    }
    cursor.seq = params.seq;
    lastCursor = { ...cursor };
    deliver(params);
  };

  /**
   * Attach (or re-attach after a resync) and replay what arrived while waiting for the answer.
   * @param {{epoch: string, seq: number} | null} after
   */
  const attach = async (after) => {
    cursor = null;
    /** @type {any} */
    const params = { sessionId, role: 'controller' };
    if (after) params.after = after;
    const result = await client.request('session/attach', params);
    if (after && result.mode === 'replay') {
      if (result.epoch !== after.epoch || result.fromSeq !== after.seq) {
        throw new Exit(1, `replay resumes after ${result.epoch}/${result.fromSeq}, expected ${after.epoch}/${after.seq}`);
      }
    } else if (after && result.mode === 'snapshot') {
      io.err('tether-node: resynced from a snapshot; some output of this turn may be missing\n');
      const turn = turnId && result.snapshot?.turns?.find((/** @type {any} */ t) => t.id === turnId);
      if (turn && TERMINAL.has(turn.status)) {
        // The turn ended while we were behind; its turn_completed will not be replayed.
        turnEnded(turn.status, turn.error);
      }
    }
    cursor = { epoch: result.epoch, seq: result.fromSeq };
    lastCursor = { ...cursor };
    const queued = held;
    held = [];
    for (const p of queued) accept(p);
    return result;
  };

  client.on('event', (/** @type {SessionEventParams} */ params) => {
    if (params && params.sessionId === sessionId) accept(params);
  });
  client.on('resync', (/** @type {SessionResyncParams} */ params) => {
    if (!params || params.sessionId !== sessionId) return;
    if (!opts.json) printer.endLine();
    io.err(`tether-node: fell behind (${params.reason}); re-attaching\n`);
    attach(lastCursor).catch((err) => fail(err instanceof Exit ? err.status : 1, `re-attach failed: ${err.message}`));
  });
  client.on('close', () => fail(2, 'connection to the daemon closed before the turn ended'));

  const stopInterrupt = io.onInterrupt?.(() => {
    if (turnId === null) {
      fail(130, 'interrupted');
      return;
    }
    io.err('\ntether-node: cancelling the turn (Ctrl-C again to quit)\n');
    client.request('turn/cancel', { sessionId, turnId }).catch((err) => io.err(`tether-node: ${err.message}\n`));
    const again = io.onInterrupt?.(() => fail(130, 'interrupted'));
    finished.finally(() => again?.());
  });

  try {
    if (!sessionId) {
      const created = await client.request('session/create', { title: opts.title });
      sessionId = created.session.id;
    }
    if (!opts.json) io.err(`tether-node: session ${sessionId}\n`);
    await attach(null);
    const started = await client.request('turn/start', { sessionId, text: opts.prompt });
    turnId = started.turnId;
    const queued = early;
    early = [];
    for (const p of queued) deliver(p);
  } catch (err) {
    if (err instanceof ConnectionError) fail(2, err.message);
    else fail(err instanceof Exit ? err.status : 1, err instanceof Error ? err.message : String(err));
  }

  try {
    return await finished;
  } finally {
    stopInterrupt?.();
  }
}

/** Prints events as JSON lines, exactly the params objects received. */
class JsonPrinter {
  /** @param {CliIO} io */
  constructor(io) {
    this.io = io;
  }

  /** @param {SessionEventParams} params */
  event(params) {
    this.io.out(`${JSON.stringify(params)}\n`);
  }

  endLine() {}
}

// Characters a terminal would not show as themselves: control characters (ESC sequences, CR,
// BEL, C1 controls) other than tab, newline and the CR of a CRLF, bidi controls, zero-width and
// other format characters, private-use and unassigned code points, line/paragraph separators.
const HIDDEN = /(?![\t\n])(?!\r\n)[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Cn}\p{Zl}\p{Zp}]/gu;

/**
 * `s` with every character a terminal would not show as itself written as an escape, as the
 * Python CLI does (`\x1b`, `\r`, `\u202e`), so that nothing the daemon relays can hide,
 * erase or reorder what a person reads.
 * @param {string} s
 */
export function visible(s) {
  return s.replace(HIDDEN, (ch) => {
    const code = /** @type {number} */ (ch.codePointAt(0));
    if (ch === '\r') return '\\r';
    if (code < 0x100) return `\\x${code.toString(16).padStart(2, '0')}`;
    if (code < 0x10000) return `\\u${code.toString(16).padStart(4, '0')}`;
    return `\\U${code.toString(16).padStart(8, '0')}`;
  });
}

/** Prints events for a person: assistant text inline, tool calls and notices one line each. */
export class HumanPrinter {
  /** @param {CliIO} io */
  constructor(io) {
    this.io = io;
    this.atLineStart = true;
    /** @type {Map<string, string>} item id -> item type */
    this.itemTypes = new Map();
    /** @type {Set<string>} items whose text has been (partly) printed */
    this.printed = new Set();
  }

  /** @param {string} s */
  write(s) {
    if (!s) return;
    this.io.out(visible(s));
    this.atLineStart = s.endsWith('\n');
  }

  /** @param {string} s */
  line(s) {
    this.endLine();
    this.write(`${s}\n`);
  }

  endLine() {
    if (!this.atLineStart) this.write('\n');
  }

  /** @param {SessionEventParams} params */
  event(params) {
    const ev = params.event;
    switch (ev.type) {
      case 'item_started':
        if (ev.item) this.itemStarted(ev.item);
        break;
      case 'item_delta':
        if (ev.itemId && this.itemTypes.get(ev.itemId) === 'agent_message' && ev.delta) {
          this.printed.add(ev.itemId);
          this.write(ev.delta);
        }
        break;
      case 'item_completed':
        if (ev.item) this.itemCompleted(ev.item);
        break;
      case 'session_renamed':
        this.line(`(session renamed: ${ev.title})`);
        break;
      default:
        break;
    }
  }

  /** @param {Item} item */
  itemStarted(item) {
    this.itemTypes.set(item.id, item.type);
    if (item.type === 'agent_message' && item.text) {
      this.printed.add(item.id);
      this.write(item.text);
    } else if (item.type === 'tool_call') {
      this.printed.add(item.id);
      this.line(`→ ${item.tool}(${oneLine(item.arguments ?? '', 200)})`);
    } else if (item.type === 'notice') {
      this.printed.add(item.id);
      this.line(notice(item));
    }
  }

  /** @param {Item} item */
  itemCompleted(item) {
    const seen = this.printed.has(item.id);
    if (item.type === 'agent_message' && item.superseded) {
      // A reply whose model call broke off and was retried: the retried reply replaces it.
      if (seen) this.line('(the reply above broke off; the retried reply replaces it)');
    } else if (item.type === 'agent_message') {
      if (!seen && item.text) this.write(item.text);
      this.endLine();
    } else if (item.type === 'tool_call') {
      if (!seen) this.line(`→ ${item.tool}(${oneLine(item.arguments ?? '', 200)})`);
      const status = item.status ?? 'completed';
      const mark = status === 'completed' ? '✓' : '✗';
      const detail = status === 'completed' || !item.output ? '' : `: ${oneLine(item.output, 200)}`;
      this.line(`  ${mark} ${item.tool} ${status}${detail}`);
    } else if (item.type === 'notice' && !seen) {
      this.line(notice(item));
    }
    this.itemTypes.delete(item.id);
    this.printed.delete(item.id);
  }
}

/** @param {Item} item */
function notice(item) {
  const code = item.code ? ` [${item.code}]` : '';
  return `! ${item.level ?? 'info'}: ${item.message ?? ''}${code}`;
}

/**
 * Collapse whitespace and cut to `max` characters.
 * @param {string} s
 * @param {number} max
 */
function oneLine(s, max) {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Whether this module is the program being run (directly or through an npm bin link). */
function isMain() {
  if (!process.argv[1]) return false;
  try {
    return realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  const status = await runCli(process.argv.slice(2), {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
    env: process.env,
    onInterrupt: (handler) => {
      process.once('SIGINT', handler);
      return () => process.off('SIGINT', handler);
    },
  });
  process.exitCode = status;
}
