// A webview view whose button asks the extension host to count a press; the host answers and
// the page shows the answer, so a test that sees the new text has seen a round trip through the
// extension host, not only a script inside the page.
const vscode = require("vscode");
const crypto = require("crypto");

function html(webview) {
  const nonce = crypto.randomBytes(16).toString("hex");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy"
  content="default-src 'none'; script-src 'nonce-${nonce}'; style-src ${webview.cspSource};">
</head>
<body>
<button data-testid="press">Press</button>
<p data-testid="status">not pressed</p>
<script nonce="${nonce}">
  const vscode = acquireVsCodeApi();
  document.querySelector('[data-testid="press"]').addEventListener("click", () => {
    vscode.postMessage({ type: "press" });
  });
  window.addEventListener("message", (event) => {
    if (event.data.type === "pressed") {
      document.querySelector('[data-testid="status"]').textContent =
        "pressed " + event.data.count;
    }
  });
</script>
</body>
</html>`;
}

function activate(context) {
  let presses = 0;
  context.subscriptions.push(
    vscode.window.registerWebviewViewProvider("harnessFixture.view", {
      resolveWebviewView(view) {
        view.webview.options = { enableScripts: true };
        view.webview.html = html(view.webview);
        view.webview.onDidReceiveMessage((message) => {
          if (message.type === "press") {
            presses += 1;
            view.webview.postMessage({ type: "pressed", count: presses });
          }
        });
      },
    }),
    vscode.commands.registerCommand("harnessFixture.open", () =>
      vscode.commands.executeCommand("harnessFixture.view.focus"),
    ),
  );
}

function deactivate() {}

module.exports = { activate, deactivate };
