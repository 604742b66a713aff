// The webview's page: a strict CSP (nothing remote; only the bundled script, by nonce, and
// the bundled stylesheet), the pane the script renders into, and the prompt box. The session
// view's elements are the browser page's too (src/web/index.ts builds its index.html).

/** The page, given the webview's own URIs for the bundled script and stylesheet. */
export function webviewHtml(options: { cspSource: string; scriptUri: string; styleUri: string; nonce: string }): string {
  const { cspSource, scriptUri, styleUri, nonce } = options;
  const csp = [
    "default-src 'none'",
    `style-src ${cspSource}`,
    `script-src 'nonce-${nonce}'`,
    `img-src ${cspSource}`,
    `font-src ${cspSource}`,
  ].join("; ");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${styleUri}">
<title>tether</title>
</head>
<body>
${sessionViewHtml({ host: "vscode" })}
<script nonce="${nonce}" src="${scriptUri}"></script>
</body>
</html>`;
}

/**
 * The session view's elements, which page.ts wires: the toolbar, the pane the state renders
 * into, and the prompt box with the pickers. `host`: VS Code's webview (a session picker, the
 * editor's context) or the browser page (a way back to the list on a phone).
 */
export function sessionViewHtml(options: { host: "vscode" | "browser" }): string {
  const vscode = options.host === "vscode";
  return `<div class="toolbar">
${vscode ? "" : `  <button class="back" data-testid="back" data-action="showList" title="The workspaces and sessions">‹ Sessions</button>\n`}\
  <button data-testid="new-session" data-action="newSession" title="New session">New</button>
  <label title="The new session works in a git worktree of its own"><input type="checkbox" id="worktree" data-testid="worktree-checkbox"> worktree</label>
${vscode ? `  <button data-testid="pick-session" data-action="pickSession" title="Attach to a session">Sessions…</button>\n` : ""}\
  <button id="fork" data-testid="fork-button" data-action="fork" title="A new session with this one's conversation" disabled>Fork</button>
  <button id="cancel" data-testid="cancel-button" data-action="cancel" disabled>Cancel</button>
  <button id="undo" data-testid="undo-button" data-action="undo" disabled>Undo turn</button>
</div>
<main id="pane" data-testid="session"></main>
<footer>
  <textarea id="prompt" data-testid="prompt-input" rows="3" placeholder="Ask tether… (Enter sends, Shift+Enter: new line)"></textarea>
  <div class="settings-row">
    <select id="model" data-testid="model-select" title="The model the session's turns call"></select>
    <select id="mode" data-testid="mode-select" title="Permission mode: what tether asks before doing"></select>
${vscode ? "" : `    <button data-testid="send-button" data-action="send">Send</button>\n`}\
  </div>
${
  vscode
    ? `  <div class="send-row">
    <label><input type="checkbox" id="with-editor" data-testid="with-editor" checked> with editor context</label>
    <button data-testid="send-button" data-action="send">Send</button>
  </div>
`
    : ""
}</footer>`;
}

/** A random nonce for the page's script tag. */
export function makeNonce(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}
