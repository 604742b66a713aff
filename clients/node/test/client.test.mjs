// Tests for tether-client.mjs against a fake daemon: a tiny `ws` server that speaks just
// enough of the protocol. The CLI runs as a child process, as an editor would run it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, mkdir, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { WebSocketServer } from 'ws';

import {
  ErrorCode,
  RpcError,
  TetherClient,
  ConnectionError,
  HumanPrinter,
  findDiscovery,
  visible,
  workspaceKey,
} from '../tether-client.mjs';

const CLI = fileURLToPath(new URL('../tether-client.mjs', import.meta.url));
const TOKEN = 'tok-3f9a';
const SESSION = 'ses-1';
const TURN = 'turn-1';
const EPOCH = 'ep-A';

/**
 * @typedef {object} TurnContext
 * @property {(result: any) => void} respond  answer the turn/start request
 * @property {(seq: number, event: object, extra?: object) => object} emit  send one session/event
 * @property {(method: string, params: object) => void} notify
 * @property {import('ws').WebSocket} ws
 */

/**
 * Start a fake daemon. `onTurnStart(ctx)` scripts what happens after `turn/start`.
 * `onAttach(params, respond, ctx)` may override the session/attach answer.
 * `rejectWith: [status, reason]` refuses every upgrade.
 * @param {{rejectWith?: [number, string], onTurnStart?: (ctx: TurnContext) => void, onAttach?: (params: any, ctx: TurnContext & {attachCount: number}) => void}} [script]
 */
async function startFakeDaemon(script = {}) {
  const rejectWith = script.rejectWith;
  /** @type {Array<{method: string, params: any, id: any}>} */
  const requests = [];
  /** @type {string[]} */
  const authHeaders = [];
  const wss = new WebSocketServer({
    host: '127.0.0.1',
    port: 0,
    verifyClient: (info, cb) => {
      authHeaders.push(info.req.headers.authorization ?? '');
      if (rejectWith) cb(false, rejectWith[0], rejectWith[1]);
      else if (info.req.headers.authorization === `Bearer ${TOKEN}`) cb(true);
      else cb(false, 401, 'Unauthorized');
    },
  });
  await new Promise((resolve) => wss.once('listening', resolve));
  let attachCount = 0;
  wss.on('connection', (ws) => {
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString());
      requests.push({ method: msg.method, params: msg.params, id: msg.id });
      const respond = (/** @type {any} */ result) =>
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }));
      const respondError = (/** @type {number} */ code, /** @type {string} */ message) =>
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code, message } }));
      const notify = (/** @type {string} */ method, /** @type {object} */ params) =>
        ws.send(JSON.stringify({ jsonrpc: '2.0', method, params }));
      /** @type {TurnContext} */
      const ctx = {
        ws,
        respond,
        notify,
        emit: (seq, event, extra = {}) => {
          const params = { sessionId: SESSION, epoch: EPOCH, seq, event, ...extra };
          notify('session/event', params);
          return params;
        },
      };
      switch (msg.method) {
        case 'initialize':
          respond({ protocolVersion: 1, daemonVersion: '0.1.0', workspace: '/w', pid: process.pid });
          break;
        case 'session/create':
          respond({ session: { id: SESSION, title: msg.params.title, createdAt: 1, updatedAt: 1 } });
          break;
        case 'session/attach':
          attachCount += 1;
          if (msg.params.sessionId !== SESSION) {
            respondError(ErrorCode.SESSION_NOT_FOUND, `no session ${msg.params.sessionId}`);
          } else if (script.onAttach) {
            script.onAttach(msg.params, { ...ctx, attachCount });
          } else {
            respond({ epoch: EPOCH, mode: 'snapshot', fromSeq: 0, snapshot: null });
          }
          break;
        case 'turn/start':
          if (script.onTurnStart) script.onTurnStart(ctx);
          else respond({ turnId: TURN });
          break;
        default:
          respondError(ErrorCode.METHOD_NOT_FOUND, `no method ${msg.method}`);
      }
    });
  });
  const port = /** @type {import('node:net').AddressInfo} */ (wss.address()).port;
  return {
    port,
    requests,
    authHeaders,
    close: () =>
      new Promise((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => resolve(undefined));
      }),
  };
}

/** Events of one ordinary turn, without seq numbers. */
function happyTurn(turnId = TURN) {
  return [
    { type: 'turn_started', turnId, startedAt: 10 },
    { type: 'item_started', turnId, item: { type: 'user_message', id: 'i1', text: 'hi there' } },
    { type: 'item_completed', turnId, item: { type: 'user_message', id: 'i1', text: 'hi there' } },
    { type: 'item_started', turnId, item: { type: 'agent_message', id: 'i2', text: '' } },
    { type: 'item_delta', turnId, itemId: 'i2', delta: 'Hello, ' },
    { type: 'item_delta', turnId, itemId: 'i2', delta: 'world.' },
    { type: 'item_completed', turnId, item: { type: 'agent_message', id: 'i2', text: 'Hello, world.' } },
    {
      type: 'item_started',
      turnId,
      item: { type: 'tool_call', id: 'i3', callId: 'c1', tool: 'read_file', arguments: '{"path": "a.txt"}', status: 'running' },
    },
    { type: 'item_delta', turnId, itemId: 'i3', delta: 'file contents' },
    {
      type: 'item_completed',
      turnId,
      item: {
        type: 'tool_call', id: 'i3', callId: 'c1', tool: 'read_file',
        arguments: '{"path": "a.txt"}', status: 'completed', output: 'file contents',
      },
    },
    { type: 'item_started', turnId, item: { type: 'notice', id: 'i4', level: 'warning', code: 'retry', message: 'model call retried' } },
    { type: 'item_completed', turnId, item: { type: 'notice', id: 'i4', level: 'warning', code: 'retry', message: 'model call retried' } },
    { type: 'session_renamed', title: 'Greeting' },
    { type: 'turn_completed', turnId, status: 'completed', endedAt: 11, usage: { inputTokens: 5, outputTokens: 3 } },
  ];
}

/**
 * Run the CLI as a child process.
 * @param {string[]} args
 * @param {NodeJS.ProcessEnv} [envOverrides]
 * @returns {Promise<{code: number | null, stdout: string, stderr: string}>}
 */
function runCli(args, envOverrides = {}) {
  const env = { ...process.env };
  delete env.TETHER_DISCOVERY_FILE;
  Object.assign(env, envOverrides);
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let tmp = '';
before(async () => {
  tmp = await realpath(await mkdtemp(path.join(os.tmpdir(), 'tether-node-test-')));
});
after(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/**
 * Write a discovery file for a fake daemon and return its path.
 * @param {number} port
 * @param {{token?: string, name?: string, pid?: number}} [opts]
 */
async function writeDiscovery(port, { token = TOKEN, name = `disc-${port}.json`, pid = process.pid } = {}) {
  const file = path.join(tmp, name);
  await mkdir(path.dirname(file), { recursive: true });
  const info = {
    pid, port, token, protocolVersion: 1, daemonVersion: '0.1.0', workspace: tmp, startedAt: 1700000000.5,
  };
  await writeFile(file, JSON.stringify(info));
  return file;
}

describe('CLI against a fake daemon', () => {
  test('streams a turn in human format and exits 0', async () => {
    const other = { type: 'item_started', turnId: 'turn-other', item: { type: 'agent_message', id: 'x', text: 'NOT MINE' } };
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        // Events of our turn arrive before the turn/start answer: the client must hold them.
        const events = happyTurn();
        let seq = 0;
        emit(++seq, events[0]);
        emit(++seq, events[1]);
        respond({ turnId: TURN });
        emit(++seq, other); // another turn's event, in sequence: ignored
        for (const ev of events.slice(2)) emit(++seq, ev);
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--workspace', tmp, '--discovery-file', file, '--prompt', 'hi there', '--title', 't1']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /Hello, world\.\n/);
      assert.match(r.stdout, /^→ read_file\(\{"path": "a\.txt"\}\)$/m);
      assert.match(r.stdout, /^ {2}✓ read_file completed$/m);
      assert.match(r.stdout, /^! warning: model call retried \[retry\]$/m);
      assert.match(r.stdout, /session renamed: Greeting/);
      assert.doesNotMatch(r.stdout, /NOT MINE/);
      assert.doesNotMatch(r.stdout, /file contents/, 'tool output deltas are not printed');
      assert.equal(r.stdout.match(/Hello, world\./g)?.length, 1, 'assistant text printed once');

      assert.equal(daemon.authHeaders[0], `Bearer ${TOKEN}`);
      const methods = daemon.requests.map((q) => q.method);
      assert.deepEqual(methods, ['initialize', 'session/create', 'session/attach', 'turn/start']);
      for (const q of daemon.requests) assert.equal(typeof q.id, 'string', 'request ids are strings');
      assert.equal(new Set(daemon.requests.map((q) => q.id)).size, daemon.requests.length);
      const [init, create, attach, start] = daemon.requests;
      assert.equal(init.params.clientName, 'tether-node');
      assert.equal(init.params.protocolVersion, 1);
      assert.equal(typeof init.params.clientVersion, 'string');
      assert.deepEqual(create.params, { title: 't1' });
      assert.deepEqual(attach.params, { sessionId: SESSION, role: 'controller' });
      assert.deepEqual(start.params, { sessionId: SESSION, text: 'hi there' });
    } finally {
      await daemon.close();
    }
  });

  test('--json prints each session/event params object of the turn, as received', async () => {
    /** @type {object[]} */
    const mine = [];
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        let seq = 0;
        emit(++seq, { type: 'item_started', turnId: 'turn-other', item: { type: 'reasoning', id: 'r', text: '' } });
        for (const ev of happyTurn()) mine.push(emit(++seq, ev));
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x', '--json']);
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stdout.trimEnd().split('\n').map((l) => JSON.parse(l));
      assert.deepEqual(lines, mine);
      assert.deepEqual(lines.map((l) => l.seq), mine.map((_, i) => i + 2));
    } finally {
      await daemon.close();
    }
  });

  test('a seq gap exits 1 with an error on stderr', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        const events = happyTurn();
        emit(1, events[0]);
        emit(2, events[1]);
        emit(4, events[2]); // seq 3 is missing
        emit(5, events.at(-1));
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /seq gap: expected seq 3, got 4/);
    } finally {
      await daemon.close();
    }
  });

  test('a repeated seq and a wrong epoch also exit 1', async () => {
    for (const [bad, pattern] of [
      [{ seq: 1 }, /seq repeat: expected seq 2, got 1/],
      [{ seq: 2, epoch: 'ep-B' }, /epoch ep-B, expected epoch ep-A/],
    ]) {
      const daemon = await startFakeDaemon({
        onTurnStart: ({ respond, emit }) => {
          respond({ turnId: TURN });
          const events = happyTurn();
          emit(1, events[0]);
          emit(/** @type {number} */ (bad.seq), events[1], bad.epoch ? { epoch: bad.epoch } : {});
          emit(3, events.at(-1));
        },
      });
      try {
        const file = await writeDiscovery(daemon.port);
        const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
        assert.equal(r.code, 1);
        assert.match(r.stderr, pattern);
      } finally {
        await daemon.close();
      }
    }
  });

  test('seq continues from the attach fromSeq', async () => {
    const daemon = await startFakeDaemon({
      onAttach: (_params, { respond }) => respond({ epoch: EPOCH, mode: 'snapshot', fromSeq: 41, snapshot: null }),
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        let seq = 41;
        for (const ev of happyTurn()) emit(++seq, ev);
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x', '--session', SESSION]);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(daemon.requests.map((q) => q.method), ['initialize', 'session/attach', 'turn/start']);
    } finally {
      await daemon.close();
    }
  });

  test('a wrong token exits 2', async () => {
    const daemon = await startFakeDaemon();
    try {
      const file = await writeDiscovery(daemon.port, { token: 'wrong' });
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /rejected the token \(HTTP 401: Unauthorized\)/);
      assert.deepEqual(daemon.authHeaders, ['Bearer wrong']);
      assert.equal(daemon.requests.length, 0);
    } finally {
      await daemon.close();
    }
  });

  test('a 403 from the daemon exits 2 and shows its reason', async () => {
    const daemon = await startFakeDaemon({ rejectWith: [403, 'the Host header must name a loopback address'] });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /refused the connection \(HTTP 403: the Host header must name a loopback address\)/);
    } finally {
      await daemon.close();
    }
  });

  test('a failed turn exits 1 and prints the error', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        emit(1, { type: 'turn_started', turnId: TURN, startedAt: 1 });
        emit(2, {
          type: 'turn_completed', turnId: TURN, status: 'failed', endedAt: 2,
          error: { code: 'model_auth', message: 'The API key was rejected; set TETHER_API_KEY.' },
        });
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /turn failed: The API key was rejected; set TETHER_API_KEY\. \[model_auth\]/);
    } finally {
      await daemon.close();
    }
  });

  test('an error response to turn/start exits 1', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ ws }) => {
        // Answer the last request (turn/start has id "4": initialize, create, attach, start).
        ws.send(JSON.stringify({ jsonrpc: '2.0', id: '4', error: { code: ErrorCode.NOT_CONTROLLER, message: 'observer' } }));
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /turn\/start: observer \(code -32013\)/);
    } finally {
      await daemon.close();
    }
  });

  test('on session/resync it re-attaches after the last event and continues', async () => {
    const events = happyTurn();
    /** @type {any[]} */
    const attaches = [];
    const daemon = await startFakeDaemon({
      onAttach: (params, { respond, emit, attachCount }) => {
        attaches.push(params);
        if (attachCount === 1) {
          respond({ epoch: EPOCH, mode: 'snapshot', fromSeq: 0, snapshot: null });
          return;
        }
        // Replay the rest, partly before the attach answer, partly after.
        emit(4, events[3]);
        respond({ epoch: EPOCH, mode: 'replay', fromSeq: 3 });
        events.slice(4).forEach((ev, i) => emit(5 + i, ev));
      },
      onTurnStart: ({ respond, emit, notify }) => {
        respond({ turnId: TURN });
        emit(1, events[0]);
        emit(2, events[1]);
        emit(3, events[2]);
        notify('session/resync', { sessionId: SESSION, reason: 'send queue full' });
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /Hello, world\./);
      assert.match(r.stderr, /fell behind \(send queue full\)/);
      assert.equal(attaches.length, 2);
      assert.deepEqual(attaches[1], { sessionId: SESSION, role: 'controller', after: { epoch: EPOCH, seq: 3 } });
    } finally {
      await daemon.close();
    }
  });

  test('a connection dropped mid-turn exits 2', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit, ws }) => {
        respond({ turnId: TURN });
        emit(1, happyTurn()[0]);
        setTimeout(() => ws.terminate(), 50);
      },
    });
    try {
      const file = await writeDiscovery(daemon.port);
      const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /closed before the turn ended/);
    } finally {
      await daemon.close();
    }
  });
});

describe('discovery', () => {
  test('the workspace key matches the daemon (sha256 of the path, 16 hex digits)', () => {
    // Values computed with Python's hashlib, as the daemon does.
    assert.equal(workspaceKey('/tmp/ws'), 'b011ea26cc731e1a');
    assert.equal(workspaceKey('/home/dév/proj'), 'b1dbb68ea1e071e3');
  });

  test('found under $XDG_RUNTIME_DIR/tether for a resolved workspace', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        happyTurn().forEach((ev, i) => emit(i + 1, ev));
      },
    });
    try {
      const runtime = path.join(tmp, 'xdg');
      const ws = path.join(tmp, 'workspace');
      await mkdir(ws, { recursive: true });
      await writeDiscovery(daemon.port, { name: `xdg/tether/daemon-${workspaceKey(ws)}.json` });
      // A relative workspace path is resolved before hashing.
      const rel = path.relative(process.cwd(), ws);
      const found = await findDiscovery({ workspace: rel, env: { XDG_RUNTIME_DIR: runtime } });
      assert.equal(found.port, daemon.port);
      const r = await runCli(['--workspace', ws, '--prompt', 'x'], { XDG_RUNTIME_DIR: runtime });
      assert.equal(r.code, 0, r.stderr);
    } finally {
      await daemon.close();
    }
  });

  test('TETHER_DISCOVERY_FILE is used when no --discovery-file is given', async () => {
    const file = await writeDiscovery(1234, { name: 'env.json' });
    const found = await findDiscovery({ workspace: '/nowhere', env: { TETHER_DISCOVERY_FILE: file } });
    assert.equal(found.port, 1234);
    assert.equal(found.token, TOKEN);
    assert.equal(found.path, file);
  });

  test('no XDG_RUNTIME_DIR and no discovery file is a clear usage error (exit 2)', async () => {
    const r = await runCli(['--workspace', tmp, '--prompt', 'x'], { XDG_RUNTIME_DIR: undefined });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /XDG_RUNTIME_DIR is not set.*--discovery-file/);
  });

  test('a missing or malformed discovery file exits 2', async () => {
    let r = await runCli(['--discovery-file', path.join(tmp, 'nope.json'), '--prompt', 'x']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /no daemon discovery file at/);
    const bad = path.join(tmp, 'bad.json');
    await writeFile(bad, JSON.stringify({ port: 1, token: 'x' }));
    r = await runCli(['--discovery-file', bad, '--prompt', 'x']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /"pid" must be a number/);
  });

  test('nothing listening on the port exits 2', async () => {
    const daemon = await startFakeDaemon();
    const port = daemon.port;
    await daemon.close();
    const file = await writeDiscovery(port, { name: 'dead.json', pid: 2 ** 22 + 12345 });
    const r = await runCli(['--discovery-file', file, '--prompt', 'x']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /cannot connect to ws:\/\/127\.0\.0\.1:\d+\/.*ECONNREFUSED/);
  });
});

describe('usage', () => {
  test('missing --prompt or an unknown option exits 2', async () => {
    let r = await runCli(['--discovery-file', '/x']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--prompt TEXT is required/);
    r = await runCli(['--prompt', 'x', '--bogus']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /usage: tether-node/);
  });

  test('--help exits 0', async () => {
    const r = await runCli(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /usage: tether-node --prompt TEXT/);
  });
});

describe('library', () => {
  test('a superseded reply is said to be replaced, and one never streamed is not printed', () => {
    const out = [];
    const printer = new HumanPrinter({ out: (s) => out.push(s), err: () => {}, env: {} });
    const ev = (seq, event) => printer.event({ sessionId: 's', epoch: 'e', seq, event });
    const msg = (id, extra) => ({ id, type: 'agent_message', text: '', ...extra });
    ev(1, { type: 'item_started', turnId: 't', item: msg('a') });
    ev(2, { type: 'item_delta', turnId: 't', itemId: 'a', delta: 'cut of' });
    ev(3, { type: 'item_completed', turnId: 't', item: msg('a', { text: 'cut of', superseded: true }) });
    ev(4, { type: 'item_completed', turnId: 't', item: msg('b', { text: 'never shown', superseded: true }) });
    ev(5, { type: 'item_started', turnId: 't', item: msg('c') });
    ev(6, { type: 'item_delta', turnId: 't', itemId: 'c', delta: 'The whole answer.' });
    ev(7, { type: 'item_completed', turnId: 't', item: msg('c', { text: 'The whole answer.' }) });
    const text = out.join('');
    assert.equal(
      text,
      'cut of\n(the reply above broke off; the retried reply replaces it)\nThe whole answer.\n',
    );
  });

  test('visible() escapes what a terminal would not show, keeping tabs and line breaks', () => {
    assert.equal(visible('echo ok\x1b[2K\rrm -rf ~\x07'), 'echo ok\\x1b[2K\\rrm -rf ~\\x07');
    assert.equal(visible('\u202eevil\u200b \x9b'), '\\u202eevil\\u200b \\x9b');
    assert.equal(visible('a\tb\nc\r\nnaïve ✓'), 'a\tb\nc\r\nnaïve ✓');
  });

  test('request() resolves results, rejects error responses with .code, and events are emitted', async () => {
    const daemon = await startFakeDaemon({
      onTurnStart: ({ respond, emit }) => {
        respond({ turnId: TURN });
        emit(1, { type: 'turn_started', turnId: TURN, startedAt: 1 });
      },
    });
    try {
      const client = await TetherClient.connect({ port: daemon.port, token: TOKEN }, { clientName: 'lib-test' });
      assert.equal(client.serverInfo?.protocolVersion, 1);
      assert.equal(daemon.requests[0].params.clientName, 'lib-test');

      const created = await client.request('session/create', { title: 'a' });
      assert.equal(created.session.id, SESSION);

      await assert.rejects(client.request('session/attach', { sessionId: 'nope' }), (err) => {
        assert.ok(err instanceof RpcError);
        assert.equal(err.code, ErrorCode.SESSION_NOT_FOUND);
        assert.equal(err.method, 'session/attach');
        return true;
      });
      await assert.rejects(client.request('no/such', {}), { code: ErrorCode.METHOD_NOT_FOUND });

      /** @type {any[]} */
      const seen = [];
      const got = new Promise((resolve) => client.on('event', (p) => { seen.push(p); resolve(undefined); }));
      await client.request('session/attach', { sessionId: SESSION, role: 'controller' });
      assert.deepEqual(await client.request('turn/start', { sessionId: SESSION, text: 'x' }), { turnId: TURN });
      await got;
      assert.equal(seen[0].event.type, 'turn_started');

      await client.close();
      assert.ok(client.closed);
      await assert.rejects(client.request('daemon/status'), ConnectionError);
    } finally {
      await daemon.close();
    }
  });

  test('connect() rejects a bad token with a ConnectionError coded UNAUTHORIZED', async () => {
    const daemon = await startFakeDaemon();
    try {
      await assert.rejects(TetherClient.connect({ port: daemon.port, token: 'bad' }), {
        name: 'ConnectionError',
        code: 'UNAUTHORIZED',
      });
    } finally {
      await daemon.close();
    }
  });
});
