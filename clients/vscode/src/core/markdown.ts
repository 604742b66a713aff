// The agent's Markdown as HTML for the webview: markdown-it (CommonMark with GFM tables and
// strikethrough) and highlight.js for code blocks, then an allowlist over the result.
//
// Rules:
// - Raw HTML in the text is text (markdown-it's `html: false`); every string from the model
//   is escaped by markdown-it or highlight.js.
// - Nothing is fetched or followed: a link shows its text and its address, an image its alt
//   text and its address (no <a>, no <img>).
// - No inline styles (the webview's CSP forbids them): a table column's alignment is a class.
// - Every code block carries Copy and Insert buttons (`data-action` copyCode / insertCode;
//   the page finds the code beside them).
// - Last, `allowlisted` keeps only the tags and attributes listed below and escapes any
//   other tag, whatever produced it.
// - It renders partial text: an unclosed code fence is a code block up to the end, so a
//   message renders the same way while it streams as once it is complete, only longer.

import hljs from "highlight.js/lib/common";
import MarkdownIt from "markdown-it";
import type Token from "markdown-it/lib/token.mjs";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** `text` with the five HTML-significant characters escaped. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

const md = new MarkdownIt({ html: false, linkify: false, typographer: false, breaks: true });

interface RenderEnv {
  /** Addresses of the links open at this point, innermost last (null: an autolink, whose text is its address). */
  links?: Array<string | null>;
}

md.renderer.rules.link_open = (tokens, idx, _options, env: RenderEnv) => {
  const token = tokens[idx]!;
  (env.links ??= []).push(token.markup === "autolink" ? null : (token.attrGet("href") ?? ""));
  return "";
};
md.renderer.rules.link_close = (_tokens, _idx, _options, env: RenderEnv) => {
  const href = env.links?.pop();
  return href ? ` <span class="link">(${escapeHtml(href)})</span>` : "";
};
md.renderer.rules.image = (tokens, idx, _options, env, self) => {
  const token = tokens[idx]!;
  const alt = self.renderInlineAsText(token.children ?? [], md.options, env);
  return `[image: ${escapeHtml(alt)}] <span class="link">(${escapeHtml(token.attrGet("src") ?? "")})</span>`;
};

md.renderer.rules.fence = (tokens, idx) => {
  const token = tokens[idx]!;
  return codeBlock(token.content, token.info.trim().split(/\s+/)[0] ?? "");
};
md.renderer.rules.code_block = (tokens, idx) => codeBlock(tokens[idx]!.content, "");

// Table cells: markdown-it aligns with a style attribute; the CSP allows classes only.
md.core.ruler.push("align_as_class", (state) => {
  const visit = (token: Token): void => {
    const style = token.attrGet("style");
    if (style === null) return;
    token.attrs = (token.attrs ?? []).filter(([name]) => name !== "style");
    const align = /text-align:\s*(left|center|right)/.exec(style)?.[1];
    if (align) token.attrJoin("class", `align-${align}`);
  };
  for (const token of state.tokens) visit(token);
});

function codeBlock(code: string, lang: string): string {
  const body = code.replace(/\n$/, "");
  const known = lang !== "" && hljs.getLanguage(lang) !== undefined;
  const html = known ? hljs.highlight(body, { language: lang, ignoreIllegals: true }).value : escapeHtml(body);
  const langAttr = lang ? ` data-lang="${escapeHtml(lang)}"` : "";
  return (
    `<div class="code-block" data-testid="code-block">` +
    `<div class="code-actions">` +
    `<button class="link" data-action="copyCode" data-testid="copy-code" title="Copy the code">Copy</button>` +
    `<button class="link" data-action="insertCode" data-testid="insert-code" title="Insert the code at the editor's cursor">Insert</button>` +
    `</div><pre${langAttr}><code class="hljs">${html}</code></pre></div>\n`
  );
}

/** Tags the output may hold, each with the attributes it may carry. */
const ALLOWED = new Map<string, ReadonlySet<string>>([
  ..."p br hr h1 h2 h3 h4 h5 h6 ul li blockquote strong em s table thead tbody tr".split(" ").map((tag) => [tag, new Set<string>()] as const),
  ["ol", new Set(["start"])],
  ["span", new Set(["class"])],
  ["th", new Set(["class"])],
  ["td", new Set(["class"])],
  ["pre", new Set(["data-lang"])],
  ["code", new Set(["class"])],
  ["div", new Set(["class", "data-testid"])],
  ["button", new Set(["class", "data-action", "data-testid", "title"])],
]);

const TAG = /<(\/?)([a-zA-Z][a-zA-Z0-9]*)((?:\s+[a-zA-Z][\w:-]*(?:="[^"<>]*")?)*)\s*\/?>|</g;
const ATTRIBUTE = /([a-zA-Z][\w:-]*)(?:="([^"]*)")?/g;

/** `html` with every tag not in the allowlist escaped and every attribute not allowed on its tag dropped. */
export function allowlisted(html: string): string {
  return html.replace(TAG, (whole, close: string | undefined, name: string | undefined, attrs: string | undefined) => {
    const allowed = name === undefined ? undefined : ALLOWED.get(name.toLowerCase());
    if (allowed === undefined) return escapeHtml(whole);
    const tag = name!.toLowerCase();
    if (close) return `</${tag}>`;
    const kept = [...(attrs ?? "").matchAll(ATTRIBUTE)]
      .filter((m) => allowed.has(m[1]!.toLowerCase()))
      .map((m) => ` ${m[1]!.toLowerCase()}="${m[2] ?? ""}"`);
    return `<${tag}${kept.join("")}>`;
  });
}

/** HTML for `markdown` (see the module's rules). */
export function renderMarkdown(markdown: string): string {
  return allowlisted(md.render(markdown, {} satisfies RenderEnv)).trimEnd();
}
