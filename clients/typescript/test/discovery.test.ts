// Finding the daemon without one: the workspace key, discovery files, refused connections.

import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { locate, openSocket, readDiscovery, workspaceKey } from "../src/index.js";

test("the workspace key is the daemon's: sha256 of the resolved path, 16 hex digits", () => {
  // Values computed with Python's hashlib, as tether.protocol.discovery does.
  assert.equal(workspaceKey("/tmp/ws"), "b011ea26cc731e1a");
  assert.equal(workspaceKey("/home/dév/proj"), "b1dbb68ea1e071e3");
});

test("a missing or malformed discovery file is a DiscoveryError naming the file", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "tether-ts-disc-"));
  try {
    const missing = path.join(dir, "nope.json");
    await assert.rejects(readDiscovery(missing), { name: "DiscoveryError", code: "NOT_FOUND" });
    const bad = path.join(dir, "bad.json");
    await writeFile(bad, JSON.stringify({ port: 1, token: "x" }));
    await assert.rejects(locate({ discoveryFile: bad }), { code: "INVALID", message: /"pid" must be a number/ });
    await writeFile(bad, "{not json");
    await assert.rejects(readDiscovery(bad), { code: "INVALID" });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a Python that cannot be run is a DiscoveryError coded NO_PYTHON", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "tether-ts-py-"));
  try {
    await assert.rejects(locate({ workspace: dir, python: path.join(dir, "no-python"), env: {} }), {
      name: "DiscoveryError",
      code: "NO_PYTHON",
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a Python older than 3.11 (no -P) is a DiscoveryError saying so", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "tether-ts-py-"));
  try {
    // What Python 3.10 says of the flag that keeps the workspace off its module path.
    const old = path.join(dir, "python3.10");
    await writeFile(old, '#!/bin/sh\necho "Unknown option: -P" >&2\necho "usage: python3.10 [option] ..." >&2\nexit 2\n', { mode: 0o755 });
    await assert.rejects(locate({ workspace: dir, python: old, env: {} }), {
      name: "DiscoveryError",
      code: "UNAVAILABLE",
      message: /older than Python 3\.11/,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("nothing listening on the port is a ConnectionError coded ECONNREFUSED", async () => {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  const handlers = { message: () => {}, closed: () => {} };
  await assert.rejects(openSocket({ host: "127.0.0.1", port, token: "t" }, handlers), {
    name: "ConnectionError",
    code: "ECONNREFUSED",
  });
});
