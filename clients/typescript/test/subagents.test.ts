// A subagent's items in the folded view: they live in the turn beside the agent's own, nest
// under the task call that started them (`parentItemId`), and `item_updated` replaces the task
// call while it stays open; a snapshot taken meanwhile keeps all of it.

import assert from "node:assert/strict";
import { test } from "node:test";

import { SessionView, type AnyEvent, type SessionEventParams, type ToolCall } from "../src/browser.js";

const task: ToolCall = {
  type: "tool_call",
  id: "task1",
  callId: "c1",
  tool: "task",
  arguments: '{"description":"Find the readme","prompt":"look"}',
};

function events(...list: AnyEvent[]): SessionEventParams[] {
  return list.map((event, index) => ({ sessionId: "s", epoch: "A", seq: index + 1, event }));
}

test("a subagent's items nest under its task call, live and in a snapshot", () => {
  const view = new SessionView({ session: { id: "s", createdAt: 1, updatedAt: 1 }, epoch: "A", seq: 0 });
  for (const params of events(
    { type: "turn_started", turnId: "t", startedAt: 1 },
    { type: "item_started", turnId: "t", item: task },
    {
      type: "item_updated",
      turnId: "t",
      item: { ...task, subagent: { description: "Find the readme", state: "running" } },
    },
    {
      type: "item_started",
      turnId: "t",
      item: { type: "tool_call", id: "r1", callId: "c2", tool: "read_file", arguments: "{}", parentItemId: "task1" },
    },
    { type: "item_started", turnId: "t", item: { type: "agent_message", id: "m1", parentItemId: "task1" } },
    { type: "item_delta", turnId: "t", itemId: "m1", delta: "the readme says hi" },
  )) {
    assert.equal(view.apply(params), true);
  }
  const turn = view.turn("t");
  assert.ok(turn);
  assert.deepEqual(turn.topLevel().map((i) => i.id), ["task1"]);
  assert.deepEqual(turn.children("task1").map((i) => i.id), ["r1", "m1"]);
  const running = turn.items.get("task1");
  assert.ok(running?.type === "tool_call" && running.subagent?.state === "running");
  assert.ok(turn.open.has("task1"), "an updated item stays open");
  const reply = turn.items.get("m1");
  assert.ok(reply?.type === "agent_message" && reply.text === "the readme says hi");

  const again = new SessionView(view.snapshot());
  assert.deepEqual(again.turn("t")?.children("task1").map((i) => i.id), ["r1", "m1"]);
  assert.deepEqual(again.turn("t")?.topLevel().map((i) => i.id), ["task1"]);
});
