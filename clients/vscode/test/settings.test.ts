// Settings that name a program or a path the extension runs: a workspace's
// .vscode/settings.json must not be able to set them.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { userPython } from "../src/core/settings.js";

const MANIFEST = JSON.parse(readFileSync(path.resolve(import.meta.dirname, "..", "..", "package.json"), "utf8"));

/** Words that make a setting name a program, or a path to one. */
const RUNS_SOMETHING = /python|node|program|interpreter|executable|binary|command|\bpath\b|\bbin\b|\bruns?\b|\bstarts?\b/i;

interface Setting {
  readonly scope?: string;
  readonly description?: string;
  readonly markdownDescription?: string;
}

const settings = Object.entries(MANIFEST.contributes.configuration.properties as Record<string, Setting>);

test("the manifest declares settings", () => {
  assert.ok(settings.length > 0);
});

test("every setting naming a program or path is machine-scoped and restricted", () => {
  const running = settings.filter(([name, s]) => RUNS_SOMETHING.test(`${name} ${s.description ?? ""} ${s.markdownDescription ?? ""}`));
  assert.ok(running.some(([name]) => name === "tether.python"), "tether.python names a program");
  const restricted: string[] = MANIFEST.capabilities.untrustedWorkspaces.restrictedConfigurations;
  for (const [name, setting] of running) {
    assert.ok(["machine", "application"].includes(setting.scope ?? ""), `${name} has scope ${setting.scope ?? "(window)"}`);
    assert.ok(restricted.includes(name), `${name} is not in restrictedConfigurations`);
  }
});

test("untrusted workspaces are declared as limited support, with a description", () => {
  const untrusted = MANIFEST.capabilities.untrustedWorkspaces;
  assert.equal(untrusted.supported, "limited");
  assert.ok(typeof untrusted.description === "string" && untrusted.description.length > 0);
});

test("tether.python is taken from user settings only", () => {
  assert.equal(userPython({ globalValue: "/usr/bin/python3" }), "/usr/bin/python3");
  assert.equal(userPython({ workspaceValue: "./evil/python" }), undefined);
  assert.equal(userPython({ workspaceFolderValue: "./evil/python" }), undefined);
  assert.equal(
    userPython({ globalValue: "/usr/bin/python3", workspaceValue: "./evil/python", workspaceFolderValue: "./evil/python" }),
    "/usr/bin/python3",
  );
  assert.equal(userPython({ defaultValue: "", globalValue: "" }), undefined);
  assert.equal(userPython(undefined), undefined);
});

test("the extension reads tether.python through userPython, never through get()", () => {
  const source = readFileSync(path.resolve(import.meta.dirname, "..", "..", "src", "extension.ts"), "utf8");
  assert.match(source, /userPython\(vscode\.workspace\.getConfiguration\("tether"\)\.inspect<string>\("python"\)\)/);
  assert.doesNotMatch(source, /\.get<string>\("python"\)/);
});
