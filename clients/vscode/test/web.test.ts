// The browser page's pieces: the committed bundle is what the sources build, the workspace
// list and its notifications, escaping of hidden characters everywhere the view shows text,
// code-intel locations, and the controller as the page runs it (over the WebSocket-API
// connector) against the real daemon: a worktree session's badge, a fork, a dropped socket.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { parseFromWebview } from "../src/core/messages.js";
import { emptyState, type ViewState } from "../src/core/viewState.js";
import { fileTitle, renderFileWindow } from "../src/web/fileView.js";
import { notices, parseOverview, renderOverview, sessionStates, type Workspace } from "../src/web/overview.js";
import { renderSession, withLocations } from "../src/webview/render.js";
import { SessionController } from "../src/core/controller.js";
import { Home, RecordingHost } from "./harness.js";

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
// Right-to-left override, pop, isolate, zero-width space, escape, bell, NUL, line separator.
const HIDDEN = "a\u202Eevil\u202C\u2066x\u2069\u200B\x1b[31m\x07\x00\u2028";
const HOSTILE = `<img src=x onerror="alert(1)">${HIDDEN}`;

/** No raw hidden character in `text`. */
function assertVisible(text: string): void {
  assert.doesNotMatch(text, /[\u202a-\u202e\u2066-\u2069\u200b\u2028\x00-\x08\x1b]/u);
}

/** No raw hidden character and no tag from `HOSTILE` in `html`. */
function assertClean(html: string): void {
  assertVisible(html);
  assert.ok(!html.includes("<img"), html);
}

describe("the browser page, offline", () => {
  test("the committed clients/web/static/ is what the sources build", () => {
    const check = spawnSync(process.execPath, ["build.mjs", "--check-web"], { cwd: PACKAGE, encoding: "utf8" });
    assert.equal(check.status, 0, check.stderr);
  });

  test("every string from the session shows its hidden characters as escapes", () => {
    const state: ViewState = {
      ...emptyState("connected"),
      session: { id: "s1", title: HOSTILE, state: "idle", model: "", permissionMode: "ask", worktreeBranch: `tether/${HOSTILE}` },
      error: HOSTILE,
      todos: [{ content: HOSTILE, status: "pending" }],
      queued: [{ inputId: "i1", text: HOSTILE }],
      turns: [
        {
          id: "t1",
          status: "completed",
          error: HOSTILE,
          items: [
            { kind: "user", id: "u", text: HOSTILE, images: [HOSTILE] },
            { kind: "agent", id: "a", text: `${HOSTILE}\n\`\`\`\n${HIDDEN}\n\`\`\``, streaming: false },
            { kind: "notice", id: "n", level: "warning", message: HOSTILE },
            {
              kind: "tool",
              id: "c",
              tool: "run_command",
              title: HOSTILE,
              status: "completed",
              output: HOSTILE,
              exitCode: 1,
              hasDiff: false,
              durationSeconds: 0,
              progress: HOSTILE,
            },
            { kind: "tool", id: "d", tool: "find_references", title: "x", status: "completed", output: HOSTILE, exitCode: null, hasDiff: false, durationSeconds: 0, progress: "" },
          ],
        },
      ],
      approvals: [{ id: "p", itemId: "c", tool: HOSTILE, kind: "command", reason: HOSTILE, subject: HOSTILE, preview: HOSTILE, alwaysRule: HOSTILE }],
    };
    const html = renderSession(state);
    assertClean(html);
    assert.match(html, /a\\u202eevil\\u202c\\u2066x\\u2069\\u200b\\x1b\[31m\\x07\\x00\\u2028/);
    assert.match(html, /data-testid="worktree-badge"[^>]*>⎇ tether\/&lt;img/);
  });

  test("a command's terminal colours are left out of its output; other escape sequences show", () => {
    const state: ViewState = {
      ...emptyState("connected"),
      turns: [{ id: "t", status: "completed", error: null, items: [{ kind: "tool", id: "c", tool: "run_command", title: "pytest", status: "completed", output: "\x1b[1;31mFAILED\x1b[0m x\x1b]8;;http://e\x07", exitCode: 1, hasDiff: false, durationSeconds: 0, progress: "" }] }],
    };
    const html = renderSession(state);
    assert.match(html, /<pre data-testid="tool-output">FAILED x\\x1b\]8;;http:\/\/e\\x07<\/pre>/);
  });

  test("a code-intel or grep result's path:line is a location button; other tools' output is not", () => {
    const output = "src/app.py:12: def greet(name):\nused in lib/x.ts:3 and (pkg/mod.py:40)\nnot a place: 10:30";
    const html = withLocations(output);
    const found = [...html.matchAll(/data-path="([^"]*)" data-line="(\d+)"/g)].map((m) => `${m[1]}:${m[2]}`);
    assert.deepEqual(found, ["src/app.py:12", "lib/x.ts:3", "pkg/mod.py:40"]);
    assert.ok(html.includes("not a place: 10:30"));
    const tool = (name: string): ViewState => ({
      ...emptyState("connected"),
      turns: [{ id: "t", status: "completed", error: null, items: [{ kind: "tool", id: "c", tool: name, title: name, status: "completed", output, exitCode: null, hasDiff: false, durationSeconds: 0, progress: "" }] }],
    });
    assert.match(renderSession(tool("find_definition")), /data-action="openLocation"/);
    assert.match(renderSession(tool("grep")), /data-action="openLocation"/);
    assert.doesNotMatch(renderSession(tool("run_command")), /data-action="openLocation"/);
    assert.deepEqual(parseFromWebview({ type: "openLocation", path: "src/app.py", line: 12 }), { type: "openLocation", path: "src/app.py", line: 12 });
    assert.equal(parseFromWebview({ type: "openLocation", path: "src/app.py", line: 0 }), null);
    assert.deepEqual(parseFromWebview({ type: "newSession", worktree: true }), { type: "newSession", worktree: true });
    assert.deepEqual(parseFromWebview({ type: "fork", extra: 1 }), { type: "fork" });
  });

  test("a location clicked in the view goes to the host's openLocation", async () => {
    const host = new RecordingHost();
    const controller = new SessionController("/w", host, () => Promise.reject(new Error("no daemon here")));
    await controller.handle({ type: "openLocation", path: "src/app.py", line: 12 });
    await controller.handle({ type: "openLocation", path: "src/app.py", line: "12" });
    assert.deepEqual(host.locations, [{ path: "src/app.py", line: 12, root: "/w" }], "with no session shown, relative to the workspace");
    controller.dispose();
  });

  test("a file around a location: numbered lines, the asked one marked, every line escaped", () => {
    const window = { path: `src/${HIDDEN}.py`, startLine: 9, lines: ["def ok():", HOSTILE, "  return 1"], totalLines: 120, truncated: false };
    const html = renderFileWindow(window, 10);
    assertClean(html);
    const lines = [...html.matchAll(/data-testid="file-line" data-line="(\d+)"/g)].map((m) => Number(m[1]));
    assert.deepEqual(lines, [9, 10, 11]);
    const current = [...html.matchAll(/data-line="(\d+)" class="current"/g)].map((m) => Number(m[1]));
    assert.deepEqual(current, [10]);
    assert.ok(html.includes("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;a\\u202eevil\\u202c"), html);
    assert.ok(html.includes('<span class="number">11</span>  return 1'), html);
    const title = fileTitle(window, 10);
    assertVisible(title);
    assert.ok(title.endsWith(":10 (lines 9-11 of 120)"), title);
    assert.equal(fileTitle({ ...window, startLine: 1, lines: [], totalLines: 0 }, 1), "src/a\\u202eevil\\u202c\\u2066x\\u2069\\u200b\\x1b[31m\\x07\\x00\\u2028.py:1 (empty file)");
  });

  test("the workspace list: states, worktree badges, escaped names; notices for a person away", () => {
    const workspaces = (state: NonNullable<Workspace["sessions"][number]["state"]>): Workspace[] => [
      {
        id: "w1",
        root: "/src/app",
        name: HOSTILE,
        running: true,
        sessions: [{ id: "s1", title: HOSTILE, createdAt: 1, updatedAt: 1, state, worktree: { root: "/x", branch: "tether/fix-s1", base: "abc" } }],
      },
      { id: "w2", root: "/src/other", name: "other", running: false, sessions: [] },
    ];
    const html = renderOverview(workspaces("awaiting_approval"), { workspaceId: "w1", sessionId: "s1" });
    assertClean(html);
    assert.match(html, /data-state="awaiting_approval" aria-current="true">/);
    assert.match(html, /needs approval/);
    assert.match(html, /⎇ tether\/fix-s1/);
    assert.match(html, /data-testid="start-workspace" data-action="startWorkspace" data-workspace-id="w2"/);

    const before = sessionStates(workspaces("running"));
    assert.deepEqual(notices(new Map(), workspaces("running")), [], "nothing on the first update");
    assert.deepEqual(notices(before, workspaces("running")), []);
    const asked = notices(before, workspaces("awaiting_approval"));
    assert.equal(asked.length, 1);
    assert.match(asked[0]!.title, /needs approval$/);
    assertVisible(asked[0]!.title + asked[0]!.body);
    assert.match(notices(before, workspaces("idle"))[0]!.title, /turn ended$/);
    assert.match(notices(before, workspaces("failed"))[0]!.title, /turn failed$/);
    assert.deepEqual(notices(sessionStates(workspaces("idle")), workspaces("failed")), [], "an idle session does not fail a turn");

    assert.equal(parseOverview("{"), null);
    assert.equal(parseOverview(JSON.stringify({ type: "other" })), null);
    assert.deepEqual(parseOverview(JSON.stringify({ type: "workspaces", workspaces: [{ id: 1 }, workspaces("idle")[1]] })), [workspaces("idle")[1]]);
  });
});

describe("the browser page's controller against the daemon", () => {
  let home: Home;
  before(async () => {
    home = await Home.create();
    // A git repository with a commit, for a session in a worktree of its own.
    await rm(path.join(home.workspace, ".git"), { recursive: true });
    const git = (...args: string[]) => {
      const run = spawnSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd: home.workspace, encoding: "utf8" });
      assert.equal(run.status, 0, run.stderr);
    };
    git("init", "-q");
    git("add", ".");
    git("commit", "-q", "--message=start");
  });
  after(async () => {
    await home?.close();
  });

  test("a session in a worktree shows its branch; a fork is shown; a dropped socket catches up, nothing lost or doubled", async () => {
    await home.setScript({ steps: [{ text: "first answer" }, { text: "second answer" }] });
    const sockets: Array<{ terminate(): void }> = [];
    const { controller, host } = await home.webController(sockets);
    const other = await home.client("terminal");
    try {
      await controller.handle({ type: "newSession", worktree: true });
      const shown = await host.waitForState((s) => s.session !== null);
      assert.match(shown.session!.worktreeBranch ?? "", /^tether\//);
      await controller.handle({ type: "send", text: "one" });
      await host.waitForState((s) => s.runningTurnId === null && s.turns.length === 1 && s.turns[0]!.status !== "running");

      sockets.at(-1)!.terminate(); // the phone sleeps
      await host.waitForState((s) => s.connection === "reconnecting");
      const watching = await other.attach(shown.session!.id);
      await watching.startTurn("two"); // while the page is away
      const caught = await host.waitForState((s) => s.connection === "connected" && s.turns.length === 2 && s.runningTurnId === null && s.turns[1]!.status !== "running");
      const answers = caught.turns.flatMap((t) => t.items.filter((i) => i.kind === "agent").map((i) => (i as { text: string }).text));
      assert.deepEqual(answers, ["first answer", "second answer"]);

      await controller.handle({ type: "fork" });
      const forked = await host.waitForState((s) => s.session !== null && s.session.id !== shown.session!.id);
      assert.equal(forked.turns.length, 2, "the fork has the conversation");

      // A code-intel place in a worktree session's answer is in its worktree, not the workspace.
      const { sessions } = await other.call("session/list", {});
      const root = sessions.find((s) => s.id === forked.session!.id)?.worktree?.root;
      assert.ok(root && root !== home.workspace, `the fork works in a worktree of its own: ${root}`);
      await controller.handle({ type: "openLocation", path: "src/app.py", line: 2 });
      assert.deepEqual(host.locations.at(-1), { path: "src/app.py", line: 2, root });

      // So is an edit it makes, which the diff editor shows whole from the worktree's file.
      await home.setScript({
        steps: [
          { tool_calls: [{ name: "read_file", arguments: { path: "README.md" } }] },
          { tool_calls: [{ name: "edit_file", arguments: { path: "README.md", old_string: "It greets.", new_string: "It waves." } }] },
          { text: "changed" },
        ],
      });
      await controller.handle({ type: "send", text: "wave" });
      const edited = await host.waitForState((s) => s.turns.length === 3 && s.runningTurnId === null && s.turns[2]!.status !== "running");
      const edit = edited.turns[2]!.items.find((i) => i.kind === "tool" && i.tool === "edit_file");
      assert.ok(edit?.kind === "tool" && edit.hasDiff);
      await controller.openDiff(edit.id);
      assert.equal(host.diffs.at(-1)?.root, root);
      assert.equal(host.diffs.at(-1)?.documents.whole, true, "the worktree's file is the edit's after");
    } finally {
      other.close();
      controller.dispose();
    }
  });

  test("a connection that stopped answering (a phone asleep) is dropped by checkConnection and made again; the session catches up", async () => {
    await home.setScript({ steps: [{ text: "before" }, { text: "during" }] });
    const sockets: Array<{ pause(): void }> = [];
    const { controller, host } = await home.webController(sockets as never[]);
    const other = await home.client("terminal");
    try {
      const session = await controller.newSession();
      await controller.send("one");
      await host.waitForState((s) => s.runningTurnId === null && s.turns.length === 1 && s.turns[0]!.status !== "running");
      sockets.at(-1)!.pause(); // nothing more is read: the daemon's answers and its close frame alike
      const watching = await other.attach(session.id);
      await watching.waitForTurn((await watching.startTurn("two")).turnId);
      await controller.checkConnection(300);
      const caught = await host.waitForState((s) => s.turns.length === 2 && s.runningTurnId === null && s.turns[1]!.status !== "running");
      const answers = caught.turns.flatMap((t) => t.items.filter((i) => i.kind === "agent").map((i) => (i as { text: string }).text));
      assert.deepEqual(answers, ["before", "during"]);
      assert.equal(sockets.length, 2, "one new socket");
    } finally {
      other.close();
      controller.dispose();
    }
  });

  test("text sent while New is still creating the session goes to that session, not a second one", async () => {
    await home.setScript({ steps: [{ text: "only one" }] });
    const { controller, host } = await home.webController();
    const other = await home.client("terminal");
    try {
      const before = (await other.call("session/list", {})).sessions.length;
      const created = controller.handle({ type: "newSession" }); // not awaited: the person types on
      await controller.handle({ type: "send", text: "quick" });
      await created;
      await host.waitForState((s) => s.runningTurnId === null && s.turns.length === 1 && s.turns[0]!.status !== "running");
      assert.equal((await other.call("session/list", {})).sessions.length, before + 1);
    } finally {
      other.close();
      controller.dispose();
    }
  });
});
