// Bundles the extension host's code (CommonJS, as VS Code loads it; `vscode` is provided at
// run time) and the webview's script (a browser IIFE) into dist/, and beside them the
// licences of the packages bundled in (dist/third-party-notices.txt). No source maps: the
// .vsix carries only what runs.
//
// `node build.mjs --web` builds the browser page of `tether web` instead: the same view
// behind the browser's host (src/web/main.ts) into ../web/static/, with its index.html and
// stylesheets; those files are committed, so `tether web` runs from a Python install without
// npm. `--check-web` builds it in memory and fails, naming the files, when the committed
// ones differ (esbuild's output is deterministic: the same sources give the same bytes).
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
process.chdir(here);

const common = { bundle: true, minify: false, sourcemap: false, legalComments: "none", logLevel: "warning", metafile: true };

const mode = process.argv[2];
if (mode === "--web" || mode === "--check-web") {
  process.exit((await buildWeb(mode === "--check-web")) ? 0 : 1);
}

/** The browser page's files by name: built, or copied from the sources. */
async function webFiles() {
  const result = await build({
    ...common,
    entryPoints: ["src/web/main.ts"],
    outfile: "web.js",
    write: false,
    minify: true,
    platform: "browser",
    format: "iife",
    target: "es2022",
  });
  // index.html is made by running src/web/index.ts, bundled in memory as a module.
  const index = await build({ ...common, entryPoints: ["src/web/index.ts"], write: false, metafile: false, platform: "neutral", format: "esm" });
  const { indexHtml } = await import(`data:text/javascript;base64,${Buffer.from(index.outputFiles[0].contents).toString("base64")}`);
  return new Map([
    ["web.js", Buffer.from(result.outputFiles[0].contents)],
    ["index.html", Buffer.from(indexHtml())],
    ["web.css", readFileSync("src/web/web.css")],
    ["webview.css", readFileSync("media/webview.css")],
    ["third-party-notices.txt", Buffer.from(thirdPartyNotices([result], "this page"))],
  ]);
}

/** Write the page's files into ../web/static/, or (`check`) say which of those there differ; true when none does. */
async function buildWeb(check) {
  const folder = path.join("..", "web", "static");
  const stale = [];
  for (const [name, bytes] of await webFiles()) {
    const file = path.join(folder, name);
    if (!check) writeFileSync(file, bytes);
    else if (!readFileIfAny(file)?.equals(bytes)) stale.push(name);
  }
  if (stale.length > 0) console.error(`stale in clients/web/static/: ${stale.join(", ")} (run \`npm run build:web\` in clients/vscode)`);
  return stale.length === 0;
}

function readFileIfAny(file) {
  try {
    return readFileSync(file);
  } catch {
    return null;
  }
}

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

writeFileSync("dist/third-party-notices.txt", thirdPartyNotices(results, "this extension"));

/** The licences of the npm packages bundled into the builds' outputs. */
function thirdPartyNotices(builds, what) {
  const roots = new Set();
  for (const { metafile } of builds) {
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
  return `The packages bundled into ${what}, and their licences.\n\n${notices.join("\n\n")}`;
}
