// The controller (everything the extension does beneath VS Code) against the real daemon
// and the scripted model server: the view state a turn produces, approvals answered for
// every attached client, the picker and attaching mid-turn to a session the terminal
// started, diff inputs and undo, the editor context a turn carries, cancel, workspace trust.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { buildEditorContext } from "../src/core/editorContext.js";
import type { ItemState, ViewState } from "../src/core/viewState.js";
import { renderSession } from "../src/webview/render.js";
import { Home, RecordingHost } from "./harness.js";

const lastTurn = (s: ViewState) => s.turns.at(-1);
const ended = (s: ViewState) => s.runningTurnId === null && (lastTurn(s)?.status ?? "running") !== "running";
const kinds = (s: ViewState) => lastTurn(s)?.items.map((i) => i.kind) ?? [];

function item<K extends ItemState["kind"]>(s: ViewState, kind: K): Extract<ItemState, { kind: K }> {
  const found = lastTurn(s)?.items.find((i) => i.kind === kind);
  assert.ok(found, `no ${kind} item in ${JSON.stringify(kinds(s))}`);
  return found as Extract<ItemState, { kind: K }>;
}

/** README.md reads "It greets." and the model's script reads it, then edits it to "It waves."; its path. */
async function scriptReadmeEdit(home: Home): Promise<string> {
  const file = path.join(home.workspace, "README.md");
  await writeFile(file, "# Demo project\nIt greets.\n");
  await home.setScript({
    steps: [
      { tool_calls: [{ name: "read_file", arguments: { path: "README.md" } }] },
      { tool_calls: [{ name: "edit_file", arguments: { path: "README.md", old_string: "It greets.", new_string: "It waves." } }] },
      { text: "changed" },
    ],
  });
  return file;
}

describe("the controller against the daemon", () => {
  let home: Home;
  before(async () => {
    home = await Home.create();
  });
  after(async () => {
    await home?.close();
  });

  test("a turn: tool call with its output, streamed Markdown, the context meter", async () => {
    await home.setScript({
      steps: [
        { tool_calls: [{ name: "read_file", arguments: { path: "README.md" } }] },
        // Held after its first piece: the view is shown the running turn, however busy the machine.
        { text: "It **greets**. <script>x</script>", chunks: 4, hold_at_chunks: [1] },
      ],
    });
    const { controller, host } = home.controller();
    try {
      await controller.send("what does it do?");
      await host.waitForState((s) => s.runningTurnId !== null && kinds(s).includes("agent"));
      await home.release();
      const state = await host.waitForState(ended);
      assert.equal(state.connection, "connected");
      assert.deepEqual(kinds(state), ["user", "tool", "agent", "summary"]);
      const tool = item(state, "tool");
      assert.equal(tool.status, "completed");
      assert.equal(tool.title, "read_file README.md");
      assert.match(tool.output, /# Demo project/);
      const reply = item(state, "agent");
      assert.equal(reply.text, "It **greets**. <script>x</script>");
      assert.equal(reply.streaming, false);
      assert.ok(state.context !== null && state.context.used > 0, "the context meter has a reading");
      assert.equal(state.canUndo, false, "reading changes no file");
    } finally {
      controller.dispose();
    }
  });

  test("an approval answered from the view resolves for every attached client", async () => {
    await home.setScript({
      steps: [{ tool_calls: [{ name: "run_command", arguments: { command: "echo approved-run", description: "say it" } }] }, { text: "done" }],
    });
    const { controller, host } = home.controller();
    const other = await home.client("terminal");
    try {
      const { session: created } = await other.call("session/create", { permissionMode: "ask" });
      const session = await controller.attach(created.id);
      const watching = await other.attach(session.id);
      const asked = new Promise<string>((resolve) => watching.on("approval", (r) => resolve(r.id)));
      await controller.send("run it");
      const waiting = await host.waitForState((s) => s.approvals.length === 1);
      const approval = waiting.approvals[0]!;
      assert.equal(approval.subject, "echo approved-run");
      assert.equal(item(waiting, "tool").status, "awaiting_approval");
      assert.equal(waiting.session?.state, "awaiting_approval");
      assert.equal(await asked, approval.id, "the other client is asked the same question");

      assert.deepEqual(await controller.answer(approval.id, "always"), { answered: true });
      const done = await host.waitForState(ended);
      assert.deepEqual(done.approvals, []);
      assert.match(item(done, "tool").output, /approved-run/);
      await watching.waitForTurn(done.runningTurnId ?? lastTurn(done)!.id);
      assert.equal(watching.view.pendingApprovals.size, 0, "resolved for the other client too");

      // The other client answering too late is told who answered first.
      const { answerApproval } = await import("../src/core/approvals.js");
      assert.deepEqual(await answerApproval(watching, approval.id, "deny"), {
        answered: false,
        reason: "already answered by vscode (allow)",
      });
    } finally {
      other.close();
      controller.dispose();
    }
  });

  test("the picker lists a session the terminal started, and attaching joins its turn mid-way", async () => {
    // Held after five words until the view has joined: mid-way, however busy the machine.
    await home.setScript({ steps: [{ text: "word ".repeat(40).trim(), chunks: 40, hold_at_chunks: [5] }] });
    const { controller, host } = home.controller();
    let cliDone = false;
    const cli = home.cli("run", "from the terminal: count words").finally(() => (cliDone = true));
    try {
      const watcher = await home.client("watcher");
      let sessionId: string | undefined;
      try {
        for (;;) {
          const { sessions } = await watcher.call("session/list", {});
          sessionId = sessions.find((s) => s.title?.startsWith("from the terminal") && s.status === "running")?.id;
          if (sessionId) break;
          if (cliDone) assert.fail(`the CLI ended before its turn was seen running: ${JSON.stringify(await cli)}`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      } finally {
        watcher.close();
      }
      const entries = await controller.sessions();
      const entry = entries.find((e) => e.sessionId === sessionId);
      assert.ok(entry, JSON.stringify(entries));
      assert.equal(entry.busy, true);
      assert.equal(entries[0]!.sessionId, sessionId, "running sessions come first");

      host.pick = (offered) => offered.find((e) => e.label.includes("from the terminal"))!.sessionId;
      await controller.pick();
      const joined = await host.waitForState((s) => s.session?.id === sessionId);
      assert.ok(joined.runningTurnId !== null, "attached while the turn runs");
      await home.release();
      const done = await host.waitForState(ended);
      assert.equal(item(done, "agent").text, "word ".repeat(40).trim(), "the text streamed before attaching is there too");
      assert.equal((await cli).code, 0);
    } finally {
      await cli;
      controller.dispose();
    }
  });

  test("an edit opens as before/after documents, and undo turn restores the file (asking when it changed since)", async () => {
    const file = await scriptReadmeEdit(home);
    const { controller, host } = home.controller();
    try {
      await controller.send("change it");
      const state = await host.waitForState(ended);
      const edit = lastTurn(state)!.items.find((i) => i.kind === "tool" && i.tool === "edit_file");
      assert.ok(edit?.kind === "tool" && edit.hasDiff);
      assert.equal(state.canUndo, true);

      await controller.openDiff(edit.id);
      assert.deepEqual(host.diffs.at(-1)?.documents, {
        path: "README.md",
        before: "# Demo project\nIt greets.\n",
        after: "# Demo project\nIt waves.\n",
        whole: true,
      });

      await writeFile(file, "# Demo project\nIt waves, edited by hand.\n");
      assert.equal(host.diffs.length, 1);
      await controller.openDiff(edit.id);
      assert.equal(host.diffs.at(-1)?.documents.whole, false, "the file changed since: the hunks alone");

      host.confirmAnswer = false;
      const refused = await controller.undo();
      assert.equal(refused?.applied, false);
      assert.match(host.confirmations.at(-1) ?? "", /README\.md/);
      assert.equal(await readFile(file, "utf8"), "# Demo project\nIt waves, edited by hand.\n", "nothing is undone unasked");

      host.confirmAnswer = true;
      const undone = await controller.undo();
      assert.equal(undone?.applied, true);
      assert.equal(await readFile(file, "utf8"), "# Demo project\nIt greets.\n");
      assert.ok(host.notices.some((n) => n.message.includes("Undone: README.md")));
    } finally {
      controller.dispose();
    }
  });

  test("send selection carries the active file, selection and the other open editors", async () => {
    await home.setScript({ steps: [{ text: "seen" }] });
    const { controller, host } = home.controller();
    try {
      host.editor = buildEditorContext({
        workspace: home.workspace,
        active: { file: path.join(home.workspace, "src", "app.py"), line: 1, character: 4, selection: "return f'hello {name}'" },
        open: [path.join(home.workspace, "src", "app.py"), path.join(home.workspace, "README.md")],
      });
      await controller.handle({ type: "send", text: "explain the selection", withEditor: true });
      await host.waitForState(ended);
      const user = [...controller.session!.view.turns.at(-1)!.items.values()].find((i) => i.type === "user_message");
      assert.ok(user?.type === "user_message");
      assert.match(user.context ?? "", /The user's editor has src\/app\.py open, cursor at line 2, column 5\./);
      assert.match(user.context ?? "", /<selection file="src\/app\.py">\nreturn f'hello \{name\}'\n<\/selection>/);
      assert.match(user.context ?? "", /Also open in the editor: README\.md\./);
    } finally {
      controller.dispose();
    }
  });

  test("cancel ends the running turn; a bad webview message changes nothing", async () => {
    // Held after five chunks, never released: still running when cancelled.
    await home.setScript({ steps: [{ text: "slow ".repeat(200), chunks: 200, hold_at_chunks: [5] }] });
    const { controller, host } = home.controller();
    try {
      await controller.send("go slowly");
      await host.waitForState((s) => s.runningTurnId !== null && (item(s, "user") !== undefined));
      const before = host.posted.length;
      await controller.handle({ type: "eval", code: "nope" });
      assert.equal(host.posted.length, before);
      await controller.handle({ type: "cancel" });
      const state = await host.waitForState(ended);
      assert.equal(lastTurn(state)?.status, "cancelled");
      assert.deepEqual(host.notices.filter((n) => n.level === "error"), []);
      assert.match(await controller.daemonLog(), /daemon-[0-9a-f]{16}\.log$/);
    } finally {
      controller.dispose();
    }
  });

  test("a queued message that a cancel drops is shown as not sent and goes back to the prompt", async () => {
    await home.setScript({ steps: [{ text: "slow ".repeat(200), chunks: 200, hold_at_chunks: [5] }] });
    const { controller, host } = home.controller();
    try {
      await controller.send("go slowly");
      await host.waitForState((s) => s.runningTurnId !== null && kinds(s).includes("agent"));
      await controller.send("and then <this>");
      const queued = await host.waitForState((s) => s.queued.length === 1);
      const turnId = queued.runningTurnId;
      await controller.handle({ type: "cancel" });
      const state = await host.waitForState((s) => ended(s) && s.dropped.length === 1);
      assert.deepEqual(state.queued, []);
      const [dropped] = state.dropped;
      assert.equal(dropped!.text, "and then <this>");
      assert.equal(dropped!.turnId, turnId);
      assert.match(dropped!.reason, /cancelled/);
      assert.deepEqual(host.restored, ["and then <this>"]);
      const html = renderSession(state);
      assert.match(html, /data-kind="dropped"[^>]*><div class="why">Not sent \(the turn ended \(cancelled\)[^<]*\):<\/div>and then &lt;this&gt;<\/div><\/section>/);
    } finally {
      controller.dispose();
    }
  });

  test("after a reload of the window the view shows the session it showed; a deleted one is forgotten", async () => {
    await home.setScript({ steps: [{ text: "remembered" }] });
    const first = home.controller();
    let sessionId: string;
    try {
      await first.controller.send("hello");
      sessionId = first.controller.session!.id;
      await first.host.waitForState(ended);
    } finally {
      first.controller.dispose();
    }
    assert.equal(first.host.memory.value, sessionId);

    // A new window: a new controller and webview, the workspace's memory kept.
    const reloaded = new RecordingHost();
    reloaded.memory.value = sessionId;
    const second = home.controller(reloaded);
    try {
      await second.controller.handle({ type: "ready" });
      const state = await reloaded.waitForState((s) => s.session !== null && ended(s));
      assert.equal(state.session!.id, sessionId);
      assert.equal(item(state, "agent").text, "remembered");
    } finally {
      second.controller.dispose();
    }

    const client = await home.client();
    try {
      await client.call("session/delete", { sessionId });
    } finally {
      client.close();
    }
    const third = home.controller(reloaded);
    try {
      await third.controller.handle({ type: "ready" });
      assert.equal(reloaded.posted.at(-1)?.session, null);
      assert.equal(reloaded.memory.value, undefined);
      assert.deepEqual(reloaded.notices, []);
    } finally {
      third.controller.dispose();
    }
  });

  test("a Python without tether: the setting is named, the header says it once, the prompt is kept", async () => {
    const scratch = await mkdtemp(path.join(tmpdir(), "tether-vscode-"));
    try {
      const venv = path.join(scratch, "venv");
      const made = spawnSync("python3", ["-I", "-m", "venv", "--without-pip", venv]);
      assert.equal(made.status, 0, String(made.stderr));
      const workspace = path.join(scratch, "project");
      await mkdir(workspace);
      const { controller, host } = home.controllerWithPython(path.join(venv, "bin", "python"), workspace);
      try {
        await controller.handle({ type: "ready" });
        await controller.handle({ type: "send", text: "my carefully typed prompt" });
        assert.deepEqual(host.restored, ["my carefully typed prompt"]);
        const errors = host.notices.filter((n) => n.level === "error");
        assert.equal(errors.length, 2, "once at start, once for the send");
        assert.match(errors[1]!.message, /does not have tether installed .*Set "tether\.python" in your user settings/);
        const state = await host.waitForState((s) => s.connection === "closed" && s.error !== null);
        const header = /<header[^>]*>(.*?)<\/header>/.exec(renderSession(state))?.[1]?.replace(/<[^>]+>/g, "");
        assert.equal(header, "No session not connected");
      } finally {
        controller.dispose();
      }
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  test("the model and mode pickers: the next session's before it exists, then the session's own", async () => {
    await home.setScript({ steps: [{ text: "one" }, { text: "two" }] });
    const { controller, host } = home.controller();
    try {
      await controller.handle({ type: "ready" });
      const ready = await host.waitForState((s) => s.settings.models.length > 0);
      const { models, defaultModel } = ready.settings;
      assert.ok(defaultModel !== "" && models.includes(defaultModel), JSON.stringify(ready.settings));
      assert.deepEqual([ready.settings.model, ready.settings.permissionMode], ["", ""]);

      await controller.handle({ type: "configure", permissionMode: "ask" });
      await host.waitForState((s) => s.session === null && s.settings.permissionMode === "ask");
      await controller.send("first");
      const created = await host.waitForState((s) => s.session !== null && ended(s));
      assert.equal(created.session!.permissionMode, "ask", "the session was created in the chosen mode");

      const client = await home.client();
      try {
        await controller.handle({ type: "configure", permissionMode: "auto" });
        await controller.handle({ type: "configure", model: "other-model" });
        const configured = await host.waitForState((s) => s.settings.permissionMode === "auto" && s.settings.model === "other-model");
        const { snapshot } = await client.call("session/read", { sessionId: configured.session!.id });
        assert.equal(snapshot.session.permissionMode, "auto");
        assert.equal(snapshot.session.model, "other-model");
        assert.deepEqual(host.notices.filter((n) => n.level === "error"), []);
      } finally {
        client.close();
      }
    } finally {
      controller.dispose();
    }
  });

  test("a pending edit opens in the diff editor before it is made, and is answered from there", async () => {
    const file = await scriptReadmeEdit(home);
    const { controller, host } = home.controller();
    const client = await home.client("terminal");
    try {
      const { session } = await client.call("session/create", { permissionMode: "ask" });
      await controller.attach(session.id);
      await controller.send("change it");
      const waiting = await host.waitForState((s) => s.approvals.length === 1 && s.approvals[0]!.kind === "edit");
      const approval = waiting.approvals[0]!;
      assert.match(renderSession(waiting), new RegExp(`data-testid="approval-diff" data-action="openProposedDiff" data-approval-id="${approval.id}"`));

      await controller.handle({ type: "openProposedDiff", approvalId: approval.id });
      assert.deepEqual(host.diffs.at(-1), {
        documents: { path: "README.md", before: "# Demo project\nIt greets.\n", after: "# Demo project\nIt waves.\n", whole: true },
        title: "README.md (tether: proposed edit)",
        root: home.workspace,
        pending: { approvalId: approval.id },
      });
      assert.equal(await readFile(file, "utf8"), "# Demo project\nIt greets.\n", "nothing is written before the answer");

      assert.deepEqual(await controller.answer(approval.id, "allow"), { answered: true });
      await host.waitForState(ended);
      assert.equal(await readFile(file, "utf8"), "# Demo project\nIt waves.\n");
      await controller.handle({ type: "openProposedDiff", approvalId: approval.id });
      assert.match(host.notices.at(-1)?.message ?? "", /no longer pending/);
    } finally {
      client.close();
      controller.dispose();
    }
  });

  test("trusting the workspace asks first, and a second time withdraws it", async () => {
    const { controller, host } = home.controller();
    try {
      const client = await controller.client();
      host.confirmAnswer = false;
      assert.equal((await controller.toggleTrust()).trusted, false, "a no changes nothing");
      host.confirmAnswer = true;
      assert.equal((await controller.toggleTrust()).trusted, true);
      assert.equal((await client.call("daemon/status", {})).workspaceTrusted, true);
      assert.equal((await controller.toggleTrust()).trusted, false);
      assert.equal((await client.call("daemon/status", {})).workspaceTrusted ?? false, false, "a default is left out");
      assert.match(host.confirmations[0]!, /^Trust this workspace\?/);
      assert.match(host.confirmations[2]!, /Withdraw the trust\?$/);
      assert.deepEqual(
        host.notices.map((n) => n.message),
        ["tether: the workspace is trusted", "tether: the workspace is no longer trusted"],
      );
    } finally {
      controller.dispose();
    }
  });
});
