// The browser page's index.html, built by `node build.mjs --web` from the same session view's
// elements as VS Code's webview (webview/html.ts) beside the workspace list. The server sends
// the CSP; nothing here is inline (the script is a file, and there are no style attributes).

import { sessionViewHtml } from "../webview/html.js";

export function indexHtml(): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<link rel="stylesheet" href="/static/webview.css">
<link rel="stylesheet" href="/static/web.css">
<title>tether</title>
<script defer src="/static/web.js"></script>
</head>
<body class="web show-list">
<nav id="overview" data-testid="overview">
  <header class="overview-head">
    <strong>tether</strong>
    <span id="overview-status" data-testid="overview-status"></span>
    <button id="notify" data-testid="notify-button" title="Notify me when a session needs an approval or a turn ends, while this tab is hidden" hidden>Notify me</button>
  </header>
  <div id="workspaces" data-testid="workspaces"></div>
  <footer class="overview-foot"><a href="/static/third-party-notices.txt" target="_blank" rel="noopener" data-testid="licences">Licences</a></footer>
</nav>
<div id="session-view">
${sessionViewHtml({ host: "browser" })}
</div>
<dialog id="diff" data-testid="diff-dialog">
  <div class="diff-head"><span id="diff-title"></span><button data-action="closeDiff">Close</button></div>
  <h4>Before</h4>
  <pre id="diff-before"></pre>
  <h4>After</h4>
  <pre id="diff-after"></pre>
</dialog>
<dialog id="file" data-testid="file-dialog">
  <div class="diff-head"><span id="file-title" data-testid="file-title"></span><button data-action="closeFile">Close</button></div>
  <pre id="file-lines" class="file-lines" data-testid="file-lines"></pre>
</dialog>
<div id="toast" role="status" data-testid="toast" hidden></div>
</body>
</html>
`;
}
