// Forking, renaming, searching and reading the event log of sessions, against the real
// daemon and the scripted model server.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { ErrorCode, connect, type EventRecord } from "../src/index.js";
import { Home } from "../src/testing.js";

describe("sessions people manage", () => {
  let home: Home;
  before(async () => {
    home = await Home.create();
  });
  after(async () => {
    await home?.close();
  });

  test("rename is seen by the attached view; search, fork, the event log and file/read are typed", async () => {
    await home.model.setScript({ steps: [{ text: "The wombat sleeps." }, { text: "Again." }] });
    const client = await connect({ ...home.options(), clientName: "ts-manage" });
    try {
      const session = await client.createSession();
      const first = await session.startTurn("where is the wombat?");
      await session.waitForTurn(first.turnId);
      const second = await session.startTurn("and now?");
      await session.waitForTurn(second.turnId);

      const renamed = new Promise<void>((resolve) => {
        const off = session.on("event", (params) => {
          if (params.event.type === "session_renamed" && params.event.by === "ts-manage") {
            off();
            resolve();
          }
        });
      });
      const info = await client.renameSession(session.id, "  Wombat  watch ");
      assert.equal(info.title, "Wombat watch");
      await renamed;
      assert.equal(session.view.info.title, "Wombat watch");

      const hits = await client.searchSessions("WOMBAT", { limit: 5 });
      assert.deepEqual(hits.map((h) => [h.sessionId, h.kind, h.turnId]).sort(), [
        [session.id, "answer", first.turnId],
        [session.id, "prompt", first.turnId],
      ]);
      assert.ok(hits[0]!.rank <= hits[1]!.rank, "best first");
      assert.ok(hits.every((h) => h.parts?.some((p) => p.match && p.text.toLowerCase() === "wombat")));
      await assert.rejects(client.searchSessions("NEAR(", { syntax: true }), { code: ErrorCode.SEARCH_QUERY_INVALID });

      const fork = await client.forkSession(session.id, { turnId: first.turnId });
      assert.deepEqual(fork.session.forkedFrom, { sessionId: session.id, turnId: first.turnId });
      assert.equal(fork.session.turnCount, 1);
      assert.match(fork.note ?? "", /not copied/);
      await assert.rejects(client.forkSession(session.id, { turnId: "t_nope" }), { code: ErrorCode.TURN_NOT_FOUND });

      const file = await client.readFile("README.md", { sessionId: session.id, line: 2, before: 0 });
      assert.deepEqual([file.path, file.startLine, file.lines, file.totalLines], ["README.md", 2, ["It greets."], 2]);
      await assert.rejects(client.readFile("../outside.txt"), { code: ErrorCode.INVALID_PARAMS });

      const records: EventRecord[] = [];
      for await (const record of client.eventLog(session.id, 3)) records.push(record);
      const seqs = records.map((r) => r.seq);
      assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
      assert.equal(new Set(seqs).size, seqs.length);
      const types = records.map((r) => r.event.type);
      assert.equal(types.filter((t) => t === "turn_completed").length, 2);
      assert.equal(types.at(-1), "session_renamed");
    } finally {
      client.close();
    }
  });
});
