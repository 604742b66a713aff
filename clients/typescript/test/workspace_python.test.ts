// A workspace's own Python never runs in the processes the library starts: a repository with
// a `tether` package shadowing the modules `locate` and the daemon run is served by tether's.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";

import { connect, locate } from "../src/index.js";
import { Home } from "../src/testing.js";

const SHADOWS = [
  "tether/__init__.py",
  "tether/daemon/__init__.py",
  "tether/daemon/__main__.py",
  "tether/clients/__init__.py",
  "tether/clients/locate.py",
];

let home: Home;
let marker: string;

before(async () => {
  home = await Home.create();
  marker = path.join(home.root, "marker");
  const code = `import sys\nwith open(${JSON.stringify(marker)}, "a") as f:\n    f.write(repr(sys.argv) + "\\n")\n`;
  for (const name of SHADOWS) {
    const file = path.join(home.workspace, name);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, code);
  }
});

after(async () => {
  await home?.close();
});

test("the library's autostart runs neither the workspace's locate nor its daemon", async () => {
  const client = await connect({ ...home.options(), clientName: "ts-test" });
  try {
    assert.equal(client.serverInfo?.workspace, home.workspace);
  } finally {
    client.close();
  }
  const found = await locate({ ...home.options(), autostart: false });
  assert.equal(found.started, false);
  assert.ok(!existsSync(marker), `the workspace's code ran: ${existsSync(marker) ? readFileSync(marker, "utf8") : ""}`);
});
