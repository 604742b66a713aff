// The library against the real daemon and the scripted model server.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ConnectionError,
  ErrorCode,
  NodeSocket,
  RpcError,
  connect,
  daemonConnector,
  locate,
  type AttachedSession,
  type Connector,
  type SessionEventParams,
  type SessionSnapshot,
  type TetherClient,
} from "../src/index.js";
import { Home } from "../src/testing.js";

/** What two views of one session must agree on (not who is attached or when it changed). */
function state(snapshot: SessionSnapshot): object {
  const { session, epoch, seq, ...rest } = snapshot;
  return { title: session.title ?? "", state: session.state ?? "idle", turnCount: session.turnCount ?? 0, epoch, seq, ...rest };
}

async function daemonState(client: TetherClient, sessionId: string): Promise<object> {
  return state((await client.call("session/read", { sessionId })).snapshot);
}

/** Assert `events` are each once, in order: seq n, n+1, n+2, … in one epoch. */
function assertGapFree(events: SessionEventParams[]): void {
  assert.ok(events.length > 0);
  const first = events[0]!;
  let next = first.firstSeq ?? first.seq;
  events.forEach((e, i) => {
    assert.equal(e.epoch, first.epoch);
    // Merged deltas stand for the events firstSeq..seq.
    assert.equal(e.firstSeq ?? e.seq, next, `event ${i}: seq ${e.firstSeq ?? e.seq}, expected ${next}`);
    next = e.seq + 1;
  });
}

function record(session: AttachedSession): SessionEventParams[] {
  const seen: SessionEventParams[] = [];
  session.on("event", (params) => seen.push(params));
  return seen;
}

describe("against the daemon", () => {
  let home: Home;
  before(async () => {
    home = await Home.create();
  });
  after(async () => {
    await home?.close();
  });

  test("starts the daemon when none runs, and folds a turn as the daemon does", async () => {
    await assert.rejects(locate({ ...home.options(), autostart: false }), { name: "DiscoveryError", code: "NOT_RUNNING" });
    await home.model.setScript({
      steps: [
        { tool_calls: [{ name: "read_file", arguments: { path: "README.md" } }] },
        { reasoning: "It is short.", text: "It greets.", chunks: 3 },
      ],
    });
    const client = await connect({ ...home.options(), clientName: "ts-test" });
    try {
      assert.equal(client.serverInfo?.workspace, home.workspace);
      const session = await client.createSession({ title: "first" });
      const seen = record(session);
      const { turnId } = await session.startTurn("what does it do?");
      const turn = await session.waitForTurn(turnId);
      assert.equal(turn.status, "completed");
      const items = [...turn.items.values()];
      assert.deepEqual(
        items.map((i) => i.type),
        ["user_message", "tool_call", "reasoning", "agent_message", "turn_summary"],
      );
      const call = items[1];
      assert.ok(call?.type === "tool_call" && call.output?.startsWith("1\t# Demo project"));
      const reply = items[3];
      assert.ok(reply?.type === "agent_message" && reply.text === "It greets.");
      assertGapFree(seen);
      assert.deepEqual(state(session.view.snapshot()), await daemonState(client, session.id));
    } finally {
      client.close();
    }
    const found = await locate({ ...home.options(), autostart: false });
    assert.equal(found.started, false, "the second look finds the daemon the first one started");
  });

  test("calls are typed and errors carry their code", async () => {
    const client = await connect(home.options());
    try {
      await assert.rejects(client.call("session/read", { sessionId: "nope" }), (err: unknown) => {
        assert.ok(err instanceof RpcError);
        assert.equal(err.code, ErrorCode.SESSION_NOT_FOUND);
        assert.equal(err.method, "session/read");
        return true;
      });
      await assert.rejects(client.attach("nope"), { code: ErrorCode.SESSION_NOT_FOUND });
      const status = await client.call("daemon/status", {});
      assert.equal(status.workspace, home.workspace);
    } finally {
      client.close();
    }
    await assert.rejects(client.call("daemon/status", {}), ConnectionError);
  });

  test("a wrong token is refused with UNAUTHORIZED", async () => {
    const info = (await locate(home.options())).info;
    const { openSocket } = await import("../src/node.js");
    const handlers = { message: () => {}, closed: () => {} };
    await assert.rejects(openSocket({ host: "127.0.0.1", port: info.port, token: "wrong" }, handlers), {
      name: "ConnectionError",
      code: "UNAUTHORIZED",
    });
  });

  test("re-attaches with its cursor after the socket is killed mid-turn: no gap, no duplicate", async () => {
    // Held after five deltas until the client is back: the re-attach lands mid-turn.
    await home.model.setScript({ steps: [{ text: "word ".repeat(60), chunks: 60, hold_at_chunks: [5] }] });
    const sockets: NodeSocket[] = [];
    const base = daemonConnector(home.options());
    const connector: Connector = async (handlers) => {
      const socket = (await base(handlers)) as NodeSocket;
      sockets.push(socket);
      return socket;
    };
    const client = await connect({ ...home.options(), connector });
    try {
      const session = await client.createSession();
      const seen = record(session);
      const firstDelta = new Promise<void>((resolve) =>
        session.on("event", (p) => p.event.type === "item_delta" && resolve()),
      );
      const { turnId } = await session.startTurn("talk");
      await firstDelta;
      sockets[0]!.terminate();
      while (session.stats.replays < 1) await new Promise((resolve) => setTimeout(resolve, 10));
      assert.equal(session.view.snapshot().turns?.at(-1)?.status, "running", "the turn still runs");
      await home.model.release();
      const turn = await session.waitForTurn(turnId);
      assert.equal(turn.status, "completed");
      assert.equal(client.connections, 2);
      assert.equal(session.stats.reconnects, 1);
      assert.equal(session.stats.replays, 1, "caught up by a replay from its cursor");
      assert.equal(session.stats.snapshots, 1, "only the first attach took a snapshot");
      assertGapFree(seen);
      const reply = [...turn.items.values()].find((i) => i.type === "agent_message");
      assert.ok(reply?.type === "agent_message" && reply.text === "word ".repeat(60));
      assert.deepEqual(state(session.view.snapshot()), await daemonState(client, session.id));
    } finally {
      client.close();
    }
  });

  test("two library clients and the CLI on one session see the same final state", async () => {
    await home.model.setScript({
      steps: [
        { tool_calls: [{ name: "read_file", arguments: { path: "README.md" } }] },
        { text: "Read it.", chunks: 4 },
      ],
    });
    const one = await connect({ ...home.options(), clientName: "one" });
    const two = await connect({ ...home.options(), clientName: "two" });
    try {
      const controller = await one.createSession({ title: "shared" });
      const observer = await two.attach(controller.id, { role: "observer" });
      const ended = [controller, observer].map(
        (s) => new Promise<string>((resolve) => s.once("turnCompleted", (t) => resolve(t.id))),
      );
      const cli = await home.cli("run", "--session", controller.id, "--json", "look at the readme");
      assert.equal(cli.code, 0, cli.stderr);
      const [turnOne, turnTwo] = await Promise.all(ended);
      assert.equal(turnOne, turnTwo);
      const fromCli = cli.stdout
        .split("\n")
        .filter((line) => line.trim())
        .map((line) => JSON.parse(line) as Partial<SessionEventParams>)
        .filter((p) => p.event?.type === "item_completed");
      const cliItems = fromCli.map((p) => (p.event as { item: unknown }).item);
      const daemon = await daemonState(one, controller.id);
      assert.deepEqual(state(controller.view.snapshot()), daemon);
      assert.deepEqual(state(observer.view.snapshot()), daemon);
      assert.deepEqual([...controller.view.turn(turnOne!)!.items.values()], cliItems);
    } finally {
      one.close();
      two.close();
    }
  });

  test("an unknown event type, item type or field is ignored", async () => {
    await home.model.setScript({ steps: [{ text: "abcdefghij", chunks: 5 }] });
    let rewritten = 0;
    const base = daemonConnector(home.options());
    // A newer daemon, played by rewriting the real one's frames: the first two deltas become
    // an event of an unknown type and an unknown item, and every event and started item
    // gains a field this library does not know.
    const connector: Connector = (handlers) =>
      base({
        closed: handlers.closed,
        message: (text) => {
          const frame = JSON.parse(text) as { method?: string; params?: { event: Record<string, unknown> } };
          const params = frame.params;
          if (frame.method === "session/event" && params) {
            const event = params.event;
            if (event.type === "item_delta" && rewritten < 2) {
              params.event =
                rewritten === 0
                  ? { type: "hologram_projected", turnId: event.turnId, beam: { width: 3 } }
                  : { type: "item_started", turnId: event.turnId, item: { type: "hologram", id: "h1" } };
              rewritten += 1;
            }
            params.event.futureField = { nested: true };
            const item = params.event.item as Record<string, unknown> | undefined;
            if (params.event.type === "item_started" && item) item.futureField = 1;
          }
          handlers.message(JSON.stringify(frame));
        },
      });
    const client = await connect({ ...home.options(), connector });
    try {
      const session = await client.createSession();
      const kinds: Array<[string, boolean]> = [];
      session.on("event", (p, known) => kinds.push([p.event.type, known]));
      const { turnId } = await session.startTurn("go");
      const turn = await session.waitForTurn(turnId);
      assert.equal(rewritten, 2);
      assert.equal(turn.status, "completed");
      assert.ok(kinds.some(([type, known]) => type === "hologram_projected" && !known));
      assert.equal(session.stats.unknownEvents, 1);
      assert.equal(session.stats.gaps, 0);
      assert.ok(![...turn.items.values()].some((i) => (i.type as string) === "hologram"));
      assert.deepEqual(state(session.view.snapshot()), await daemonState(client, session.id));
    } finally {
      client.close();
    }
  });

  test("answers approvals, and a second answer is told who answered first", async () => {
    await home.model.setScript({
      steps: [
        { tool_calls: [{ name: "write_file", arguments: { path: "new.txt", content: "hi\n" } }] },
        { text: "Wrote it." },
      ],
    });
    const client = await connect({ ...home.options(), clientName: "approver" });
    try {
      const session = await client.createSession({ permissionMode: "ask" });
      const asked = new Promise<string>((resolve) => session.on("approval", (request) => resolve(request.id)));
      const { turnId } = await session.startTurn("write a file");
      const approvalId = await asked;
      assert.equal(session.view.pendingApprovals.get(approvalId)?.tool, "write_file");
      assert.equal(session.view.snapshot().session.state, "awaiting_approval");
      await session.respond(approvalId, "allow");
      await assert.rejects(session.respond(approvalId, "deny"), { code: ErrorCode.APPROVAL_RESOLVED });
      const turn = await session.waitForTurn(turnId);
      assert.equal(turn.status, "completed");
      assert.equal(session.view.pendingApprovals.size, 0);
      const call = [...turn.items.values()].find((i) => i.type === "tool_call");
      assert.ok(call?.type === "tool_call" && call.status === "completed");
    } finally {
      client.close();
    }
  });

  test("approvals pending before the attach reach listeners added after it (the README's pattern)", { timeout: 30_000 }, async () => {
    await home.model.setScript({
      steps: [
        { tool_calls: [{ name: "write_file", arguments: { path: "waiting.txt", content: "hi\n" } }] },
        { text: "Wrote it." },
      ],
    });
    const starter = await connect({ ...home.options(), clientName: "starter" });
    const client = await connect({ ...home.options(), clientName: "auto-approver" });
    try {
      const started = await starter.createSession({ permissionMode: "ask" });
      const pending = new Promise<string>((resolve) => started.on("approval", (request) => resolve(request.id)));
      const { turnId } = await started.startTurn("write a file");
      const approvalId = await pending;

      const session = await client.attach(started.id);
      const seen: string[] = [];
      session.on("approval", (request) => {
        seen.push(request.id);
        void session.respond(request.id, "allow");
      });
      const turn = await session.waitForTurn(turnId);
      assert.equal(turn.status, "completed");
      assert.deepEqual(seen, [approvalId]); // once, though the view holds it until answered
    } finally {
      client.close();
      starter.close();
    }
  });

  test("a failed turn carries its error", async () => {
    await home.model.setScript({ steps: [{ error: { status: 404, message: "no such model" } }] });
    const client = await connect(home.options());
    try {
      const session = await client.createSession();
      const { turnId } = await session.startTurn("hi");
      const turn = await session.waitForTurn(turnId);
      assert.equal(turn.status, "failed");
      assert.match(turn.error?.message ?? "", /TETHER_MODEL/);
      assert.equal(session.view.snapshot().session.state, "failed");
    } finally {
      client.close();
    }
  });
});

describe("a client that falls behind", () => {
  let home: Home;
  const answer = Array.from({ length: 6000 }, (_, i) => `<${String(i).padStart(4, "0")}>..`).join("");
  before(async () => {
    // About 1 MB of frames, more than 4,096 of them: far beyond what the sockets buffer.
    home = await Home.create({ steps: [{ text: answer, chunks: 6000 }] });
    await home.startDaemon("--idle-timeout", "0");
  });
  after(async () => {
    await home?.close();
  });

  test("gets what it missed merged, each event once, without a resync", async () => {
    let paused: NodeSocket | null = null;
    const base = daemonConnector(home.options());
    const connector: Connector = async (handlers) => {
      const socket = (await base(handlers)) as NodeSocket;
      paused ??= socket;
      return socket;
    };
    const slow = await connect({ ...home.options(), connector, clientName: "slow" });
    const fast = await connect({ ...home.options(), clientName: "fast" });
    try {
      const session = await slow.attach((await fast.call("session/create", {})).session.id);
      const watcher = await fast.attach(session.id);
      let resets = 0;
      session.on("reset", () => (resets += 1));
      // `slow` stops reading until the turn is over, as a busy UI (or a phone) might.
      paused!.ws.pause();
      const { turnId } = await watcher.startTurn("flood");
      await watcher.waitForTurn(turnId);
      paused!.ws.resume();
      const seen: SessionEventParams[] = [];
      for await (const params of session.events()) {
        seen.push(params);
        if (params.event.type === "turn_completed") break;
      }
      assert.equal(session.stats.resyncs, 0);
      assert.equal(session.stats.gaps, 0);
      assert.equal(resets, 0);
      assert.ok(session.stats.merged > 0, "its waiting deltas came merged");
      assertGapFree(seen);
      assert.equal(seen[0]?.seq, 1, "from the first event on");
      const deltas = seen.flatMap((p) => (p.event.type === "item_delta" ? [p.event.delta] : []));
      assert.equal(deltas.join(""), answer);
      assert.deepEqual(state(session.view.snapshot()), await daemonState(fast, session.id));
    } finally {
      slow.close();
      fast.close();
    }
  });
});
