// The parts beneath the VS Code layer that need no daemon: Markdown, the webview's HTML,
// diff inputs, editor context, picker data and the webview's message check.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { allowlisted, renderMarkdown } from "../src/core/markdown.js";
import { diffDocuments, parseUnifiedDiff, proposedDocuments } from "../src/core/diff.js";
import { SELECTION_CAP, buildEditorContext, capSelection } from "../src/core/editorContext.js";
import { parseFromWebview } from "../src/core/messages.js";
import { pickerEntries } from "../src/core/picker.js";
import { SessionView } from "tether-client";

import { deriveViewState, emptyState, statusBar, toolTitle, type ViewState } from "../src/core/viewState.js";
import { SessionController } from "../src/core/controller.js";
import { webviewHtml } from "../src/webview/html.js";
import { RecordingHost } from "./harness.js";
import { renderSession, settingsChoices, visible } from "../src/webview/render.js";

const HOSTILE = `<img src=x onerror="alert(1)"><script>alert(2)</script>`;

/** Tags in `html` other than the renderer's own, attribute-free ones (and its known ones). */
function foreignTags(html: string): string[] {
  return [...html.matchAll(/<\/?([a-zA-Z][\w-]*)/g)].map((m) => m[1]!).filter((t) => ["img", "script", "iframe", "a", "style", "link"].includes(t));
}

describe("markdown", () => {
  test("renders blocks and inline markup", () => {
    const html = renderMarkdown("# Title\n\nSome **bold** and *em* and `x < y`.\n\n- one\n- two\n\n3. third\n\n> quoted\n\n---\n\n~~gone~~");
    assert.match(html, /<h1>Title<\/h1>/);
    assert.match(html, /<strong>bold<\/strong> and <em>em<\/em> and <code>x &lt; y<\/code>/);
    assert.match(html, /<ul>\n<li>one<\/li>\n<li>two<\/li>\n<\/ul>/);
    assert.match(html, /<ol start="3">\n<li>third<\/li>\n<\/ol>/);
    assert.match(html, /<blockquote>\n<p>quoted<\/p>\n<\/blockquote>/);
    assert.match(html, /<hr>/);
    assert.match(html, /<s>gone<\/s>/);
  });

  test("GFM tables, aligned by class, and nested emphasis", () => {
    const table = renderMarkdown("| name | size |\n|:-----|-----:|\n| **a.py** | *12* |");
    assert.match(table, /<table>\n<thead>\n<tr>\n<th class="align-left">name<\/th>\n<th class="align-right">size<\/th>/);
    assert.match(table, /<td class="align-left"><strong>a\.py<\/strong><\/td>\n<td class="align-right"><em>12<\/em><\/td>/);
    assert.doesNotMatch(table, /style=/, "the CSP allows no inline styles");
    assert.equal(renderMarkdown("***both*** and **bold _em_ more**"), "<p><em><strong>both</strong></em> and <strong>bold <em>em</em> more</strong></p>");
  });

  test("a code block is highlighted, with Copy and Insert buttons", () => {
    const html = renderMarkdown("```python\ndef f(x):\n    return x < 1\n```");
    assert.match(html, /^<div class="code-block" data-testid="code-block"><div class="code-actions">/);
    assert.match(html, /<button class="link" data-action="copyCode" data-testid="copy-code"[^>]*>Copy<\/button>/);
    assert.match(html, /<button class="link" data-action="insertCode" data-testid="insert-code"[^>]*>Insert<\/button>/);
    assert.match(html, /<pre data-lang="python"><code class="hljs"><span class="hljs-keyword">def<\/span> <span class="hljs-title function_">f<\/span>/);
    assert.match(html, /<span class="hljs-keyword">return<\/span> x &lt; <span class="hljs-number">1<\/span><\/code><\/pre><\/div>$/);
    const unknown = renderMarkdown("```nosuchlang\n<b>x</b>\n```");
    assert.match(unknown, /<pre data-lang="nosuchlang"><code class="hljs">&lt;b&gt;x&lt;\/b&gt;<\/code><\/pre>/);
  });

  test("escapes everything from the text, in every construct", () => {
    for (const text of [
      HOSTILE,
      `# ${HOSTILE}`,
      `- ${HOSTILE}`,
      `> ${HOSTILE}`,
      "```html\n" + HOSTILE + "\n```",
      "```js\n" + HOSTILE + "\n```",
      `**${HOSTILE}**`,
      `| ${HOSTILE} |\n|---|\n| ${HOSTILE} |`,
      `[${HOSTILE}](javascript:alert(1))`,
      `[x](https://e.com "${HOSTILE}")`,
      `![${HOSTILE}](https://e.com/i.png)`,
      "```\" onmouseover=\"x\n```",
      '<a href="https://e.com">x</a>',
    ]) {
      const html = renderMarkdown(text);
      assert.deepEqual(foreignTags(html), [], html);
      assert.doesNotMatch(html, /<[^>]*\s(on\w+|href|src|style)=/, html);
    }
  });

  test("the allowlist escapes any other tag and drops any other attribute", () => {
    assert.equal(
      allowlisted('<span class="hljs-string" onclick="x()">s</span><img src="x"><a href="y">z</a><constructor><p style="color:red">p</p>'),
      '<span class="hljs-string">s</span>&lt;img src=&quot;x&quot;&gt;&lt;a href=&quot;y&quot;&gt;z&lt;/a&gt;&lt;constructor&gt;<p>p</p>',
    );
  });

  test("a link shows its address and is never followed; so does an image", () => {
    assert.equal(
      renderMarkdown("see [the docs](https://example.com/a?b=1&c=2)"),
      '<p>see the docs <span class="link">(https://example.com/a?b=1&amp;c=2)</span></p>',
    );
    assert.equal(renderMarkdown("<https://e.com/x>"), "<p>https://e.com/x</p>");
    assert.equal(renderMarkdown("![a chart](https://e.com/c.png)"), '<p>[image: a chart] <span class="link">(https://e.com/c.png)</span></p>');
  });

  test("an unclosed fence renders as code while the text streams", () => {
    const partial = renderMarkdown("Here:\n```py\nprint(1)\n# not a heading");
    assert.match(partial, /<pre data-lang="py"><code class="hljs">.*print.*\n<span class="hljs-comment"># not a heading<\/span><\/code><\/pre><\/div>$/s);
    const whole = renderMarkdown("Here:\n```py\nprint(1)\n# not a heading\n```\nafter");
    assert.ok(whole.startsWith(partial), "the complete message extends the partial one");
    assert.match(whole, /<p>after<\/p>$/);
  });
});

function stateWith(patch: Partial<ViewState>): ViewState {
  return { ...emptyState("connected"), ...patch };
}

describe("webview html", () => {
  test("session text is escaped and the stable test ids are there", () => {
    const state = stateWith({
      session: { id: `s"1`, title: HOSTILE, state: "awaiting_approval", model: "", permissionMode: "edits", worktreeBranch: null },
      turns: [
        {
          id: "t1",
          status: "running",
          error: null,
          items: [
            { kind: "user", id: "u1", text: HOSTILE, images: [`[image ${HOSTILE} 2×1, 70 B]`] },
            { kind: "agent", id: "a1", text: HOSTILE, streaming: true },
            {
              kind: "tool",
              id: `i"d`,
              tool: "run_command",
              title: `run_command ${HOSTILE}`,
              status: "awaiting_approval",
              output: HOSTILE,
              exitCode: null,
              hasDiff: true,
              durationSeconds: 0,
              progress: HOSTILE,
            },
          ],
        },
      ],
      approvals: [
        { id: `ap"1`, itemId: `i"d`, tool: "run_command", kind: "command", reason: HOSTILE, subject: HOSTILE, preview: HOSTILE, alwaysRule: HOSTILE },
      ],
      todos: [{ content: HOSTILE, status: "in_progress" }],
      context: { used: 500, budget: 1000, percent: 50 },
    });
    const html = renderSession(state);
    assert.deepEqual(foreignTags(html), []);
    assert.doesNotMatch(html, /onerror="/);
    assert.ok(!html.includes(`"ap"1"`) && html.includes('data-approval-id="ap&quot;1"'));
    for (const id of [
      "session-title",
      "session-state",
      "messages",
      "message",
      "tool-call",
      "tool-output",
      "open-diff",
      "approval",
      "approval-allow",
      "approval-always",
      "approval-deny",
      "todos",
      "context-meter",
    ]) {
      assert.ok(html.includes(`data-testid="${id}"`), `data-testid=${id}`);
    }
    assert.match(html, /<details class="tool awaiting_approval"[^>]*open>/, "a call waiting for an answer shows open");
    assert.match(html, /<progress max="100" value="50">/);
    assert.doesNotMatch(html, /style=/, "the CSP allows no inline styles");
  });

  test("an approval shows hidden characters as escapes", () => {
    const sneaky = "echo safe\u202e\u200b\x1b[2K\r; rm -rf ~";
    assert.equal(visible(sneaky), "echo safe\\u202e\\u200b\\x1b[2K\\x0d; rm -rf ~");
    assert.equal(visible("tab\tnew\nline"), "tab\tnew\nline");
    const html = renderSession(
      stateWith({
        approvals: [{ id: "a", itemId: "i", tool: "run_command", kind: "command", reason: "", subject: sneaky, preview: "", alwaysRule: sneaky }],
      }),
    );
    assert.ok(html.includes("echo safe\\u202e\\u200b\\x1b[2K\\x0d; rm -rf ~"));
    assert.ok(!/[\u202e\u200b\x1b\r]/.test(html));
  });

  test("the agent's text and reasoning show hidden characters as escapes, inside code too", () => {
    const sneaky = "if ok\u202e {\x1b[2K\r\n```\nisAdmin\u2066 = 1\u200b\n```\nfamily 👨\u200d👩\u200d👧";
    const html = renderSession(
      stateWith({
        turns: [
          {
            id: "t",
            status: "completed",
            error: null,
            items: [
              { kind: "agent", id: "a", text: sneaky, streaming: false },
              { kind: "reasoning", id: "r", text: sneaky, streaming: false },
            ],
          },
        ],
      }),
    );
    assert.ok(!/[\u202e\u2066\u200b\x1b\r]/.test(html), html);
    assert.equal(html.split("if ok\\u202e {\\x1b[2K").length, 3, "both the message and the reasoning");
    assert.ok(html.includes("isAdmin\\u2066 = 1\\u200b"), "inside a code block");
    assert.ok(html.includes("family 👨\u200d👩\u200d👧"), "an emoji sequence keeps its joiners");
  });

  test("the page allows nothing remote and only its own script", () => {
    const html = webviewHtml({ cspSource: "vscode-resource:", scriptUri: "vscode-resource:/w.js", styleUri: "vscode-resource:/w.css", nonce: "abc" });
    const csp = /Content-Security-Policy" content="([^"]+)"/.exec(html)?.[1] ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'nonce-abc'(;|$)/);
    assert.doesNotMatch(csp, /https?:|unsafe-inline|unsafe-eval|\*/);
    assert.deepEqual([...html.matchAll(/<script[^>]*>/g)].map((m) => m[0]), ['<script nonce="abc" src="vscode-resource:/w.js">']);
    for (const id of ["prompt-input", "send-button", "cancel-button", "undo-button", "new-session", "pick-session"]) {
      assert.ok(html.includes(`data-testid="${id}"`), id);
    }
  });
});

const EDIT = [
  "--- a/src/app.py",
  "+++ b/src/app.py",
  "@@ -1,3 +1,3 @@",
  " one",
  "-two",
  "+TWO",
  " three",
  "@@ -7,2 +7,3 @@",
  " seven",
  " eight",
  "+eight and a half",
  "",
].join("\n");
const BEFORE = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";
const AFTER = "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\neight and a half\nnine\n";

describe("diff inputs", () => {
  test("the whole file when the file on disk is the diff's new side", () => {
    assert.deepEqual(diffDocuments(EDIT, AFTER), { path: "src/app.py", before: BEFORE, after: AFTER, whole: true });
  });

  test("the hunks alone when the file changed since, or cannot be read", () => {
    for (const current of ["something else entirely\n", null]) {
      const docs = diffDocuments(EDIT, current);
      assert.equal(docs.whole, false);
      assert.equal(docs.before, "⋯ from line 1\none\ntwo\nthree\n⋯ from line 7\nseven\neight");
      assert.equal(docs.after, "⋯ from line 1\none\nTWO\nthree\n⋯ from line 7\nseven\neight\neight and a half");
    }
  });

  test("a created file has an empty old side", () => {
    const created = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n";
    assert.deepEqual(diffDocuments(created, "hello\nworld\n"), { path: "new.txt", before: "", after: "hello\nworld\n", whole: true });
    assert.equal(parseUnifiedDiff(created).created, true);
  });

  test("a proposed edit: the file as it is and as the edit would leave it", () => {
    assert.deepEqual(proposedDocuments(EDIT, BEFORE), { path: "src/app.py", before: BEFORE, after: AFTER, whole: true });
    const created = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n";
    assert.deepEqual(proposedDocuments(created, null), { path: "new.txt", before: "", after: "hello\nworld\n", whole: true });
    const changed = proposedDocuments(EDIT, "something else entirely\n");
    assert.equal(changed.whole, false, "the file no longer reads as the edit expects: the hunks alone");
    assert.equal(changed.after, "⋯ from line 1\none\nTWO\nthree\n⋯ from line 7\nseven\neight\neight and a half");
  });

  test("text that is not a diff is refused", () => {
    assert.throws(() => parseUnifiedDiff("hello"), /no hunk/);
  });
});

describe("editor context", () => {
  test("the active file relative, the cursor 1-based, the other open files once each", () => {
    const context = buildEditorContext({
      workspace: "/ws",
      active: { file: "/ws/src/app.py", line: 4, character: 2, selection: "def greet" },
      open: ["/ws/src/app.py", "/ws/README.md", "/ws/./README.md", "/elsewhere/x.py"],
    });
    assert.deepEqual(context, {
      openFile: "src/app.py",
      cursor: { line: 5, column: 3 },
      selection: "def greet",
      openFiles: ["README.md", "/elsewhere/x.py"],
    });
  });

  test("nothing open is no context; a blank selection is left out", () => {
    assert.equal(buildEditorContext({ workspace: "/ws" }), null);
    assert.deepEqual(buildEditorContext({ workspace: "/ws", active: { file: "/ws/a", line: 0, character: 0, selection: "  \n" } }), {
      openFile: "a",
      cursor: { line: 1, column: 1 },
    });
  });

  test("a long selection keeps its head and tail within the daemon's cap", () => {
    const cut = capSelection("HEAD" + "x".repeat(20_000) + "TAIL");
    assert.ok(cut.length <= SELECTION_CAP);
    assert.ok(cut.startsWith("HEAD") && cut.endsWith("TAIL") && cut.includes("characters cut here"));
    assert.equal(capSelection("short"), "short");
  });
});

describe("picker and status", () => {
  test("busy sessions first, then the most recent; the shown one is marked", () => {
    const entries = pickerEntries(
      [
        { id: "old", title: "old", createdAt: 0, updatedAt: 100, turnCount: 1 },
        { id: "new", title: "", createdAt: 0, updatedAt: 900, turnCount: 2, clients: 1 },
        { id: "busy", title: "from the terminal", createdAt: 0, updatedAt: 50, state: "awaiting_approval", status: "running" },
      ],
      { attachedId: "new", now: 1000 },
    );
    assert.deepEqual(entries.map((e) => e.sessionId), ["busy", "new", "old"]);
    assert.equal(entries[0]!.busy, true);
    assert.match(entries[0]!.label, /from the terminal/);
    assert.match(entries[0]!.description, /awaiting approval/);
    assert.equal(entries[1]!.label, "$(comment-discussion) (untitled)");
    assert.match(entries[1]!.description, /2 turns · 1 attached · shown/);
    assert.match(entries[2]!.detail, /^old · 15 min ago$/);
  });

  test("the status bar says the daemon's state, a running turn and waiting approvals", () => {
    assert.match(statusBar(emptyState("closed")).tooltip, /Not connected/);
    const busy = statusBar(
      stateWith({
        runningTurnId: "t",
        approvals: [{ id: "a", itemId: "i", tool: "x", kind: "tool", reason: "", subject: "", preview: "", alwaysRule: "" }],
      }),
    );
    assert.equal(busy.text, "$(sync~spin) tether $(bell-dot) 1");
    assert.match(busy.tooltip, /A turn is running\n1 approval waiting/);
  });

  test("a message's images are one line each, never their bytes", () => {
    const view = new SessionView({
      session: { id: "s", title: "", createdAt: 0, updatedAt: 0 },
      epoch: "e",
      seq: 1,
      turns: [
        {
          id: "t",
          status: "completed",
          startedAt: 0,
          items: [
            {
              type: "user_message",
              id: "u",
              text: "see",
              images: [
                { name: "shot.png", mimeType: "image/png", size: 215040, sha256: "0", width: 1280, height: 720 },
                { name: "big.png", mimeType: "image/png", size: 2097152, sha256: "1", width: 1568, height: 784, originalSize: 9437184, originalWidth: 3200, originalHeight: 1600 },
              ],
            },
          ],
        },
      ],
    });
    const [user] = deriveViewState(view, "connected").turns[0]!.items;
    assert.deepEqual(user, {
      kind: "user",
      id: "u",
      text: "see",
      images: ["[image shot.png 1280×720, 210 KB]", "[image big.png 1568×784, 2.0 MB, downscaled from 3200×1600 9.0 MB]"],
    });
    assert.match(renderSession(stateWith({ turns: [{ id: "t", status: "completed", error: null, items: [user!] }] })), /data-testid="image">\[image shot\.png 1280×720, 210 KB\]</);
  });

  test("a session attached mid-turn is idle once that turn ends", () => {
    const view = new SessionView({
      session: { id: "s", title: "from the terminal", createdAt: 0, updatedAt: 0, state: "running", status: "running" },
      epoch: "e",
      seq: 3,
      turns: [{ id: "t", status: "running", startedAt: 0 }],
    });
    assert.equal(deriveViewState(view, "connected").session?.state, "running");
    view.apply({ sessionId: "s", epoch: "e", seq: 4, event: { type: "turn_completed", turnId: "t", status: "completed", endedAt: 1 } });
    assert.equal(deriveViewState(view, "connected").session?.state, "idle");
    view.apply({ sessionId: "s", epoch: "e", seq: 5, event: { type: "turn_started", turnId: "u", startedAt: 2 } });
    view.apply({ sessionId: "s", epoch: "e", seq: 6, event: { type: "turn_completed", turnId: "u", status: "failed", endedAt: 3 } });
    assert.equal(deriveViewState(view, "connected").session?.state, "failed");
  });

  test("a running tool call shows its latest progress, and none once it ended", () => {
    const view = new SessionView({
      session: { id: "s", title: "", createdAt: 0, updatedAt: 0 },
      epoch: "e",
      seq: 1,
      turns: [{ id: "t", status: "running", startedAt: 0 }],
    });
    const call = { type: "tool_call" as const, id: "m", callId: "c", tool: "mcp__everything__index", arguments: "{}" };
    view.apply({ sessionId: "s", epoch: "e", seq: 2, event: { type: "item_started", turnId: "t", item: call } });
    view.apply({ sessionId: "s", epoch: "e", seq: 3, event: { type: "item_delta", turnId: "t", itemId: "m", delta: "", progress: { progress: 3, total: 10, message: "indexing" } } });
    const running = deriveViewState(view, "connected");
    const [tool] = running.turns[0]!.items;
    assert.equal(tool?.kind === "tool" ? tool.progress : null, "3/10 indexing");
    assert.match(renderSession(running), /data-testid="tool-progress">3\/10 indexing</);
    view.apply({ sessionId: "s", epoch: "e", seq: 4, event: { type: "item_completed", turnId: "t", item: { ...call, status: "completed", output: "ok" } } });
    assert.doesNotMatch(renderSession(deriveViewState(view, "connected")), /tool-progress/);
  });

  test("a failed turn's error shows once, where its notice is", () => {
    const message = "The model refused the request: quota exceeded.";
    const failed = (items: object[], error: string) =>
      new SessionView({
        session: { id: "s", title: "", createdAt: 0, updatedAt: 0 },
        epoch: "e",
        seq: 1,
        turns: [{ id: "t", status: "failed", startedAt: 0, error: { code: "model_error", message: error }, items: items as never }],
      });
    const notice = { type: "notice", id: "n", level: "error", code: "model_error", message };
    const html = renderSession(deriveViewState(failed([notice], message), "connected"));
    assert.equal(html.split("quota exceeded").length - 1, 1, html);
    const other = renderSession(deriveViewState(failed([notice], "Something else broke."), "connected"));
    assert.ok(other.includes("quota exceeded") && other.includes("Something else broke."), "a different error still shows");
  });

  test("an approval says what the tool wants to do to its subject", () => {
    const approval = (tool: string, kind: string, subject: string) =>
      renderSession(stateWith({ approvals: [{ id: "a", itemId: "i", tool, kind, reason: "", subject, preview: "", alwaysRule: "" }] }));
    assert.match(approval("edit_file", "edit", "src/app.py"), /<strong>edit_file<\/strong> wants to edit: <code>src\/app\.py<\/code>/);
    assert.match(approval("run_command", "command", "ls"), /wants to run: <code>ls<\/code>/);
    assert.match(approval("read_file", "read", "/etc/passwd"), /wants to read: /);
    assert.match(approval("mcp__x__y", "tool", "{}"), /wants to call: /);
  });

  test("a tool call's title is its command or path", () => {
    assert.equal(toolTitle("run_command", '{"command": "ls  -la\\n"}'), "run_command ls -la");
    assert.equal(toolTitle("read_file", '{"path": "a.py"}'), "read_file a.py");
    assert.equal(toolTitle("weird", "{not json"), "weird {not json");
  });
});

describe("model and mode pickers", () => {
  test("the daemon's model first, as the default; the current value is always offered", () => {
    const { models, modes } = settingsChoices({ models: ["m1", "m2"], defaultModel: "m1", model: "", permissionMode: "" });
    assert.deepEqual(models, [
      { value: "", label: "m1 (default)" },
      { value: "m2", label: "m2" },
    ]);
    assert.deepEqual(modes.map((m) => m.value), ["", "ask", "edits", "auto"]);
    const chosen = settingsChoices({ models: [], defaultModel: "", model: "custom", permissionMode: "edits" });
    assert.deepEqual(chosen.models.map((m) => m.value), ["", "custom"]);
    assert.deepEqual(chosen.modes.map((m) => m.value), ["ask", "edits", "auto"], "a session has a mode: no default entry");
  });

  test("the page has both pickers", () => {
    const html = webviewHtml({ cspSource: "c:", scriptUri: "c:/w.js", styleUri: "c:/w.css", nonce: "n" });
    assert.match(html, /<select id="model" data-testid="model-select"/);
    assert.match(html, /<select id="mode" data-testid="mode-select"/);
  });
});

describe("code block buttons", () => {
  test("Copy puts the code on the clipboard; Insert puts it at the cursor, or says to open a file", async () => {
    const host = new RecordingHost();
    const controller = new SessionController("/ws", host, () => Promise.reject(new Error("no daemon needed")));
    await controller.handle({ type: "copyCode", text: "print(1)" });
    await controller.handle({ type: "insertCode", text: "print(2)" });
    host.inserted = [];
    await controller.handle({ type: "insertCode", text: "print(3)" });
    await controller.handle({ type: "copyCode" });
    assert.deepEqual(host.copied, ["print(1)"]);
    assert.deepEqual(host.inserted, ["print(3)"]);
    assert.deepEqual(host.notices, [{ level: "info", message: "Open a file to insert the code into." }]);
    controller.dispose();
  });
});

describe("webview messages", () => {
  test("only well-formed messages get through", () => {
    assert.deepEqual(parseFromWebview({ type: "send", text: "hi", withEditor: true }), { type: "send", text: "hi", withEditor: true });
    assert.deepEqual(parseFromWebview({ type: "approve", approvalId: "a", choice: "always" }), { type: "approve", approvalId: "a", choice: "always" });
    assert.deepEqual(parseFromWebview({ type: "configure", model: "" }), { type: "configure", model: "" });
    assert.deepEqual(parseFromWebview({ type: "configure", permissionMode: "auto" }), { type: "configure", permissionMode: "auto" });
    for (const bad of [{ type: "configure", permissionMode: "yolo" }, { type: "configure" }, { type: "configure", model: "m", permissionMode: "ask" }]) {
      assert.equal(parseFromWebview(bad), null, JSON.stringify(bad));
    }
    for (const bad of [null, "send", { type: "send" }, { type: "approve", approvalId: "a", choice: "yes" }, { type: "eval", code: "1" }]) {
      assert.equal(parseFromWebview(bad), null, JSON.stringify(bad));
    }
  });
});
