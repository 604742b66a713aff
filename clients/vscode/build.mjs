// Bundles the extension host's code (CommonJS, as VS Code loads it; `vscode` is provided at
// run time) and the webview's script (a browser IIFE) into dist/. No source maps: the .vsix
// carries only what runs.
import { build } from "esbuild";

const common = { bundle: true, minify: false, sourcemap: false, legalComments: "none", logLevel: "warning" };

await Promise.all([
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
