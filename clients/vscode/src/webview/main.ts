// The VS Code webview's script: the shared page (page.ts) behind VS Code's webview API. It
// holds no connection (the daemon refuses browser origins, and the bearer token stays in the
// extension host): the extension host posts state and gets what the person does.

import type { ToWebview } from "../core/messages.js";
import { vsCodeHost } from "./host.js";
import { startPage } from "./page.js";

const page = startPage(vsCodeHost());
// Messages are delivered as tasks: the host's answer to the page's `ready` comes after this.
window.addEventListener("message", (event: MessageEvent<ToWebview>) => page.receive(event.data));
