// SessionView.info follows the events folded in after the attach, not only the attach's
// snapshot: a client showing the session's state (status, state, turn count) reads it there.

import assert from "node:assert/strict";
import { test } from "node:test";

import { SessionView, type SessionEventParams, type SessionSnapshot } from "../src/browser.js";

const SESSION = "s_1";

function attachedWhileAwaitingApproval(): SessionView {
  const snapshot = {
    session: { id: SESSION, createdAt: 1, updatedAt: 1, status: "running", state: "awaiting_approval", turnCount: 1 },
    epoch: "A",
    seq: 4,
    turns: [{ id: "t_1", status: "running", startedAt: 1 }],
    pendingApprovals: [
      { id: "a_1", turnId: "t_1", itemId: "i_1", tool: "run_command", arguments: "{}", kind: "command", reason: "asks" },
    ],
  } as unknown as SessionSnapshot;
  return new SessionView(snapshot);
}

function apply(view: SessionView, seq: number, event: object): void {
  view.apply({ sessionId: SESSION, epoch: "A", seq, event } as unknown as SessionEventParams);
}

test("info follows an approval answered and the turn ending after the attach", () => {
  const view = attachedWhileAwaitingApproval();
  assert.equal(view.info.state, "awaiting_approval");
  apply(view, 5, { type: "approval_resolved", approvalId: "a_1", decision: "allow", by: "cli" });
  assert.equal(view.info.state, "running");
  assert.equal(view.info.status, "running");
  apply(view, 6, { type: "turn_completed", turnId: "t_1", status: "failed", endedAt: 2 });
  assert.deepEqual([view.info.status, view.info.state, view.info.turnCount], ["idle", "failed", 1]);
  apply(view, 7, { type: "turn_started", turnId: "t_2", startedAt: 3 });
  assert.deepEqual([view.info.status, view.info.state, view.info.turnCount], ["running", "running", 2]);
  apply(view, 8, { type: "session_renamed", title: "Wombats" });
  assert.equal(view.info.title, "Wombats");
  assert.deepEqual(view.snapshot().session, view.info, "the snapshot's session is the live info");
});

test("a running tool call's latest progress is kept by its turn until the call completes", () => {
  const view = attachedWhileAwaitingApproval();
  const call = { type: "tool_call", id: "i_2", callId: "c_2", tool: "mcp__everything__index", arguments: "{}" };
  apply(view, 5, { type: "item_started", turnId: "t_1", item: call });
  const started = view.turn("t_1")!.items.get("i_2");
  apply(view, 6, { type: "item_delta", turnId: "t_1", itemId: "i_2", delta: "", progress: { progress: 1, total: 4 } });
  apply(view, 7, { type: "item_delta", turnId: "t_1", itemId: "i_2", delta: "", progress: { progress: 3, total: 4, message: "indexing" } });
  const turn = view.turn("t_1")!;
  assert.deepEqual(turn.progress.get("i_2"), { progress: 3, total: 4, message: "indexing" });
  assert.equal(turn.items.get("i_2"), started, "a report without text leaves the item as it was");
  apply(view, 8, { type: "item_completed", turnId: "t_1", item: { ...call, status: "completed", output: "done" } });
  assert.equal(turn.progress.has("i_2"), false);
});
