// Bundles the extension host's code (CommonJS, as VS Code loads it; `vscode` is provided at
// run time) and the webview's script (a browser IIFE) into dist/, and beside them the
// licences of the packages bundled in (dist/third-party-notices.txt). No source maps: the
// .vsix carries only what runs.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

import { build } from "esbuild";

const common = { bundle: true, minify: false, sourcemap: false, legalComments: "none", logLevel: "warning", metafile: true };

const results = await Promise.all([
  build({
    ...common,
    entryPoints: ["src/extension.ts"],
    outfile: "dist/extension.cjs",
    platform: "node",
    format: "cjs",
    target: "node20",
    external: ["vscode", "bufferutil", "utf-8-validate"],
  }),
  build({
    ...common,
    entryPoints: ["src/webview/main.ts"],
    outfile: "dist/webview.js",
    minify: true, // markdown-it and highlight.js's languages: a third of the size
    platform: "browser",
    format: "iife",
    target: "es2022",
  }),
]);

/** The folder of the npm package that bundled file `input` comes from, or null for tether's own code. */
function packageRoot(input) {
  const parts = path.resolve(input).split(path.sep);
  const at = parts.lastIndexOf("node_modules");
  if (at < 0) return null;
  const depth = parts[at + 1]?.startsWith("@") ? 3 : 2;
  return parts.slice(0, at + depth).join(path.sep);
}

const roots = new Set();
for (const { metafile } of results) {
  for (const input of Object.keys(metafile.inputs)) {
    const root = packageRoot(input);
    if (root !== null) roots.add(root);
  }
}
const notices = [...roots]
  .map((root) => {
    const manifest = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
    const file = readdirSync(root).find((name) => /^(licen[cs]e|copying)([.-]|$)/i.test(name));
    if (file === undefined) throw new Error(`${manifest.name} has no licence file to ship`);
    return { name: manifest.name, text: `${manifest.name} ${manifest.version} (${manifest.license})\n\n${readFileSync(path.join(root, file), "utf8").trim()}\n` };
  })
  .sort((a, b) => a.name.localeCompare(b.name))
  .map((n) => n.text);
writeFileSync("dist/third-party-notices.txt", `The packages bundled into this extension, and their licences.\n\n${notices.join("\n\n")}`);
