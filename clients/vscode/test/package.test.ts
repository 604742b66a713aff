// The .vsix that `npm run package` builds: the manifest, the two bundles and media, and
// nothing else (no node_modules, no sources, no source maps).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { inflateRawSync } from "node:zlib";
import { test } from "node:test";

const PACKAGE = path.resolve(import.meta.dirname, "..", "..");

/** The entries of a zip file, by name, read from its central directory. */
function unzip(zip: Buffer): Map<string, Buffer> {
  const end = zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, "not a zip file");
  const count = zip.readUInt16LE(end + 10);
  let at = zip.readUInt32LE(end + 16);
  const entries = new Map<string, Buffer>();
  for (let i = 0; i < count; i += 1) {
    const method = zip.readUInt16LE(at + 10);
    const size = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const extra = zip.readUInt16LE(at + 30);
    const comment = zip.readUInt16LE(at + 32);
    const local = zip.readUInt32LE(at + 42);
    const name = zip.subarray(at + 46, at + 46 + nameLength).toString("utf8");
    const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
    const data = zip.subarray(start, start + size);
    entries.set(name, method === 8 ? inflateRawSync(data) : data);
    at += 46 + nameLength + extra + comment;
  }
  return entries;
}

test("the .vsix holds the manifest and the bundles, nothing else", { timeout: 240_000 }, async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "tether-vsix-"));
  try {
    const out = path.join(dir, "tether.vsix");
    const vsce = path.join(PACKAGE, "node_modules", "@vscode", "vsce", "vsce");
    const built = spawnSync(
      process.execPath,
      [vsce, "package", "--no-dependencies", "--skip-license", "--allow-missing-repository", "--out", out],
      { cwd: PACKAGE, encoding: "utf8" },
    );
    assert.equal(built.status, 0, built.stdout + built.stderr);
    const entries = unzip(await readFile(out));
    const names = [...entries.keys()].sort();
    assert.deepEqual(
      names.filter((n) => n.startsWith("extension/")),
      [
        "extension/dist/extension.cjs",
        "extension/dist/third-party-notices.txt",
        "extension/dist/webview.js",
        "extension/media/tether.svg",
        "extension/media/webview.css",
        "extension/package.json",
        "extension/readme.md",
      ],
    );
    assert.ok(names.every((n) => !/node_modules|\.map$|\.ts$/.test(n)), names.join("\n"));

    const manifest = JSON.parse(entries.get("extension/package.json")!.toString("utf8"));
    assert.equal(manifest.main, "./dist/extension.cjs");
    const commands = manifest.contributes.commands.map((c: { command: string }) => c.command);
    for (const id of ["tether.newSession", "tether.attach", "tether.sendSelection", "tether.acceptEdit", "tether.rejectEdit", "tether.cancel", "tether.undoTurn", "tether.trustWorkspace", "tether.showDaemonLog"]) {
      assert.ok(commands.includes(id), id);
    }
    const extension = entries.get("extension/dist/extension.cjs")!.toString("utf8");
    assert.match(extension, /require\("vscode"\)/, "vscode is left to the host");
    assert.doesNotMatch(extension, /sourceMappingURL/);
    assert.match(extension, /session\/attach/, "the client library is bundled in");
    const notices = entries.get("extension/dist/third-party-notices.txt")!.toString("utf8");
    for (const bundled of ["markdown-it", "highlight.js", "ws"]) {
      assert.match(notices, new RegExp(`^${bundled.replace(".", "\\.")} \\S+ \\(`, "m"), `${bundled}'s licence ships`);
    }
    assert.doesNotMatch(entries.get("extension/dist/webview.js")!.toString("utf8"), /sourceMappingURL|require\(/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
