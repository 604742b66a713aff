// The WebSocket-API connector (what a browser page uses) against the real daemon: `ws`'s
// WebSocket stands in for the browser's, given the daemon's token as a header the way a
// relaying server adds it.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import WebSocket from "ws";

import { TetherClient, webSocketConnector, type AttachedSession, type WebSocketLike } from "../src/browser.js";
import { connect, readDiscovery } from "../src/index.js";
import { Home, tokenWebSocket } from "../src/testing.js";

let home: Home;
let url: string;
let token: string;
const opened: WebSocket[] = [];

before(async () => {
  home = await Home.create({ steps: [{ text: "one" }, { text: "two" }] });
  (await connect(home.options())).close(); // starts the daemon
  const info = await readDiscovery(home.discoveryFile);
  url = `ws://127.0.0.1:${info.port}/`;
  token = info.token;
});

after(async () => {
  await home.close();
});

/** Resolves once `session` shows `turns` turns and none running, checked now and on each change. */
function settled(session: AttachedSession, turns: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): boolean => session.view.turns.length === turns && session.view.runningTurn === undefined;
    if (done()) resolve();
    else session.on("change", () => done() && resolve());
  });
}

test("a session over the WebSocket connector streams, and catches up from its cursor after a dropped socket", async () => {
  const create = tokenWebSocket(token, opened);
  const client = await TetherClient.connect({ connector: webSocketConnector(() => url, { create }), clientName: "tether web" });
  const session = await client.createSession();
  await session.startTurn("first");
  await settled(session, 1); // the turn may have ended before startTurn's answer was read
  const dropped = new Promise((resolve) => client.once("disconnected", resolve));
  opened.at(-1)!.terminate(); // the network drops, no close handshake
  await dropped;
  const other = await connect({ ...home.options(), clientName: "cli" });
  const attached = await other.attach(session.id);
  await attached.startTurn("second"); // runs while the page is away
  // The page reconnects by itself (maybe already, while the turn above was started) and
  // catches up: the second turn can only reach it that way.
  await settled(session, 2);
  const texts = session.view.turns.flatMap((t) => [...t.items.values()].filter((i) => i.type === "agent_message").map((i) => i.text));
  assert.deepEqual(texts, ["one", "two"]);
  assert.equal(session.stats.reconnects, 1);
  other.close();
  client.close();
});

test("a refused handshake rejects with HANDSHAKE and the address", async () => {
  const refused = (address: string): WebSocketLike => {
    const ws = new WebSocket(address); // no token: the daemon answers 401
    ws.on("error", () => {});
    return ws as unknown as WebSocketLike;
  };
  await assert.rejects(TetherClient.connect({ connector: webSocketConnector(url, { create: refused }), reconnect: false }), (err: Error & { code?: string }) => {
    assert.equal(err.code, "HANDSHAKE");
    assert.match(err.message, /127\.0\.0\.1/);
    return true;
  });
});
