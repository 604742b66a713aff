// Continuity rules of an attached session, over the transport seam: a scripted in-process
// "daemon" answers the socket's frames, so gaps, repeats and epoch changes can be made on
// purpose. The same rules are exercised against the real daemon in client.test.ts.

import assert from "node:assert/strict";
import { test } from "node:test";

import { TetherClient, type Connector, type SessionEventParams, type SocketHandlers } from "../src/browser.js";

const SESSION = "s_1";

interface Request {
  id: string;
  method: string;
  params: Record<string, unknown>;
}

/** A daemon played by the test: records requests, answers them with `answer`. */
class ScriptedDaemon {
  requests: Request[] = [];
  handlers: SocketHandlers | null = null;
  answer: (request: Request) => unknown = () => ({});

  connector: Connector = async (handlers) => {
    this.handlers = handlers;
    return {
      send: (text: string) => {
        const request = JSON.parse(text) as Request;
        this.requests.push(request);
        const result =
          request.method === "initialize"
            ? { protocolVersion: 1, daemonVersion: "0", workspace: "/w", pid: 1 }
            : this.answer(request);
        queueMicrotask(() => this.handlers?.message(JSON.stringify({ jsonrpc: "2.0", id: request.id, result })));
      },
      close: () => queueMicrotask(() => this.handlers?.closed({ code: 1000, reason: "" })),
    };
  };

  event(seq: number, event: object, epoch = "A", firstSeq?: number): void {
    const params = { sessionId: SESSION, epoch, seq, event, ...(firstSeq === undefined ? {} : { firstSeq }) };
    this.handlers?.message(JSON.stringify({ jsonrpc: "2.0", method: "session/event", params }));
  }

  attaches(): Request[] {
    return this.requests.filter((r) => r.method === "session/attach");
  }
}

function snapshot(epoch: string, seq: number): object {
  return { epoch, mode: "snapshot", fromSeq: seq, snapshot: { session: { id: SESSION, createdAt: 1, updatedAt: 1 }, epoch, seq } };
}

const started = (turnId: string) => ({ type: "turn_started", turnId, startedAt: 1 });
const renamed = (title: string) => ({ type: "session_renamed", title });

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

test("a repeated seq is dropped, a gap re-attaches from the cursor and the replay fills it", async () => {
  const daemon = new ScriptedDaemon();
  daemon.answer = (r) => (r.method === "session/attach" && !r.params.after ? snapshot("A", 3) : { epoch: "A", mode: "replay", fromSeq: 4 });
  const client = await TetherClient.connect({ connector: daemon.connector });
  const session = await client.attach(SESSION);
  const seen: number[] = [];
  session.on("event", (p: SessionEventParams) => seen.push(p.seq));
  daemon.event(4, renamed("a"));
  daemon.event(4, renamed("a")); // a repeat
  daemon.event(6, renamed("c")); // seq 5 is missing
  await settle();
  assert.deepEqual(daemon.attaches().at(-1)?.params, { sessionId: SESSION, role: "controller", after: { epoch: "A", seq: 4 } });
  daemon.event(5, renamed("b")); // the replay
  daemon.event(6, renamed("c"));
  await settle();
  assert.deepEqual(seen, [4, 5, 6]);
  assert.equal(session.view.info.title, "c");
  assert.equal(session.stats.duplicates, 1);
  assert.equal(session.stats.gaps, 1);
  client.close();
});

test("merged deltas continue the cursor from their firstSeq; one that does not is a gap", async () => {
  const daemon = new ScriptedDaemon();
  daemon.answer = (r) => (r.method === "session/attach" && !r.params.after ? snapshot("A", 0) : { epoch: "A", mode: "replay", fromSeq: 7 });
  const client = await TetherClient.connect({ connector: daemon.connector });
  const session = await client.attach(SESSION);
  const seen: Array<[number, number | null | undefined]> = [];
  session.on("event", (p: SessionEventParams) => seen.push([p.seq, p.firstSeq]));
  const message = { id: "m", type: "agent_message", text: "" };
  const delta = (text: string) => ({ type: "item_delta", turnId: "t1", itemId: "m", delta: text });
  daemon.event(1, started("t1"));
  daemon.event(2, { type: "item_started", turnId: "t1", item: message });
  daemon.event(3, delta("a"));
  daemon.event(6, delta("bcd"), "A", 4); // deltas 4..6, merged for a client that fell behind
  daemon.event(6, delta("bcd"), "A", 4); // a repeat
  daemon.event(7, delta("e"));
  await settle();
  assert.deepEqual(seen, [[1, undefined], [2, undefined], [3, undefined], [6, 4], [7, undefined]]);
  assert.equal(session.view.seq, 7);
  const item = session.view.turn("t1")?.items.get("m") as { text: string } | undefined;
  assert.equal(item?.text, "abcde");
  assert.deepEqual([session.stats.gaps, session.stats.duplicates, session.stats.merged], [0, 1, 2]);
  assert.equal(daemon.attaches().length, 1);

  daemon.event(11, delta("x"), "A", 9); // starts past the cursor: seq 8 is missing
  await settle();
  assert.equal(session.stats.gaps, 1);
  assert.deepEqual(daemon.attaches().at(-1)?.params.after, { epoch: "A", seq: 7 });
  client.close();
});

test("events that arrive right behind the attach answer are held and checked against it", async () => {
  const daemon = new ScriptedDaemon();
  daemon.answer = (r) => {
    if (r.method !== "session/attach") return {};
    // The answer and the first live events in one burst, before the call's promise settles.
    queueMicrotask(() => {
      daemon.event(42, started("t1"));
      daemon.event(43, renamed("x"));
    });
    return snapshot("A", 41);
  };
  const client = await TetherClient.connect({ connector: daemon.connector });
  const session = await client.attach(SESSION);
  await settle();
  assert.equal(session.view.seq, 43);
  assert.equal(session.view.turns[0]?.id, "t1");
  assert.equal(session.stats.gaps, 0);
  client.close();
});

test("an event of another epoch re-attaches, and the snapshot answer resets the view", async () => {
  const daemon = new ScriptedDaemon();
  let attaches = 0;
  daemon.answer = (r) => (r.method === "session/attach" ? (attaches++ === 0 ? snapshot("A", 0) : snapshot("B", 7)) : {});
  const client = await TetherClient.connect({ connector: daemon.connector });
  const session = await client.attach(SESSION);
  let resets = 0;
  session.on("reset", () => (resets += 1));
  daemon.event(1, renamed("a"), "B");
  await settle();
  assert.equal(resets, 1);
  assert.deepEqual(session.cursor, { epoch: "B", seq: 7 });
  assert.equal(session.view.info.title, undefined, "the other epoch's event was not folded in");
  client.close();
});

test("session/resync re-attaches from the cursor without the caller seeing it", async () => {
  const daemon = new ScriptedDaemon();
  daemon.answer = (r) => (r.method === "session/attach" ? (r.params.after ? { epoch: "A", mode: "replay", fromSeq: 1 } : snapshot("A", 0)) : {});
  const client = await TetherClient.connect({ connector: daemon.connector });
  const session = await client.attach(SESSION);
  const seen: number[] = [];
  session.on("event", (p) => seen.push(p.seq));
  daemon.event(1, renamed("a"));
  daemon.handlers?.message(JSON.stringify({ jsonrpc: "2.0", method: "session/resync", params: { sessionId: SESSION, reason: "slow" } }));
  await settle();
  daemon.event(2, renamed("b"));
  await settle();
  assert.deepEqual(seen, [1, 2]);
  assert.equal(session.stats.resyncs, 1);
  assert.deepEqual(daemon.attaches()[1]?.params.after, { epoch: "A", seq: 1 });
  client.close();
});

test("frames that are not JSON-RPC are reported as warnings and skipped", async () => {
  const daemon = new ScriptedDaemon();
  const client = await TetherClient.connect({ connector: daemon.connector });
  const warnings: Error[] = [];
  client.on("warning", (e) => warnings.push(e));
  daemon.handlers?.message("not json");
  daemon.handlers?.message("[1,2]");
  daemon.handlers?.message(JSON.stringify({ jsonrpc: "2.0", id: "999", result: {} }));
  assert.equal(warnings.length, 3);
  assert.deepEqual(await client.call("daemon/status", {}), {});
  client.close();
});
