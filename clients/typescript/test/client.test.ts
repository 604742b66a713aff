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
import { Home } from "./harness.js";

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
  events.forEach((e, i) => {
    assert.equal(e.epoch, first.epoch);
    assert.equal(e.seq, first.seq + i, `event ${i}: seq ${e.seq}, expected ${first.seq + i}`);
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
});
