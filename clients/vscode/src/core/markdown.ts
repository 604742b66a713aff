// A small Markdown renderer for the webview: the agent's streamed text to HTML.
//
// Rules:
// - Everything from the model is escaped; the only markup in the output is the renderer's
//   own tags, none with attributes taken from the text (no links are followed, no images
//   are loaded: a link shows its text and its address, so nothing remote is ever fetched).
// - It renders partial text: an unclosed code fence is a code block up to the end, so a
//   message renders the same way while it streams as once it is complete, only longer.
// - Blocks: ATX headings, fenced code, lists (-, *, +, 1.), block quotes, rules, paragraphs.
//   Inline: `code`, **strong**, *em* / _em_, [text](url).

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** `text` with the five HTML-significant characters escaped. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

/** HTML for `markdown` (see the module's rules). */
export function renderMarkdown(markdown: string): string {
  const lines = markdown.replace(/\r\n?/g, "\n").split("\n");
  const out: string[] = [];
  let paragraph: string[] = [];
  let list: { tag: "ul" | "ol"; items: string[] } | null = null;
  let quote: string[] | null = null;

  const flushParagraph = (): void => {
    if (paragraph.length > 0) out.push(`<p>${inline(paragraph.join("\n")).replace(/\n/g, "<br>")}</p>`);
    paragraph = [];
  };
  const flushList = (): void => {
    if (list !== null) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(i)}</li>`).join("")}</${list.tag}>`);
    list = null;
  };
  const flushQuote = (): void => {
    if (quote !== null) out.push(`<blockquote>${renderMarkdown(quote.join("\n"))}</blockquote>`);
    quote = null;
  };
  const flush = (): void => {
    flushParagraph();
    flushList();
    flushQuote();
  };

  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i]!;
    const fence = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line);
    if (fence) {
      flush();
      const marker = fence[1]!;
      const body: string[] = [];
      for (i += 1; i < lines.length && !lines[i]!.trimStart().startsWith(marker); i += 1) body.push(lines[i]!);
      const lang = fence[2] ? ` data-lang="${escapeHtml(fence[2])}"` : "";
      out.push(`<pre${lang}><code>${escapeHtml(body.join("\n"))}</code></pre>`);
      continue;
    }
    const quoted = /^\s{0,3}>\s?(.*)$/.exec(line);
    if (quoted) {
      flushParagraph();
      flushList();
      (quote ??= []).push(quoted[1]!);
      continue;
    }
    flushQuote();
    if (line.trim() === "") {
      flushParagraph();
      flushList();
      continue;
    }
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      flush();
      const level = heading[1]!.length;
      out.push(`<h${level}>${inline(heading[2]!)}</h${level}>`);
      continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
      continue;
    }
    const item = /^\s{0,3}(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line);
    if (item) {
      flushParagraph();
      const tag = item[1] ? "ul" : "ol";
      if (list !== null && list.tag !== tag) flushList();
      (list ??= { tag, items: [] }).items.push(item[3]!);
      continue;
    }
    if (list !== null && /^\s+\S/.test(line)) {
      const items: string[] = list.items;
      items[items.length - 1] += `\n${line.trim()}`;
      continue;
    }
    flushList();
    paragraph.push(line);
  }
  flush();
  return out.join("\n");
}

/** Inline markup of one block's text; code spans are cut out first so nothing inside them is markup. */
function inline(text: string): string {
  return text
    .split(/(`+[^`]*?`+)/g)
    .map((part, index) => {
      if (index % 2 === 1) return `<code>${escapeHtml(part.replace(/^`+|`+$/g, ""))}</code>`;
      return escapeHtml(part)
        .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, '$1 <span class="link">($2)</span>')
        .replace(/\*\*(?=\S)(.+?)\*\*/g, "<strong>$1</strong>")
        .replace(/__(?=\S)(.+?)__/g, "<strong>$1</strong>")
        .replace(/(^|[^*\w])\*(?=\S)([^*]+?)\*(?!\w)/g, "$1<em>$2</em>")
        .replace(/(^|[^_\w])_(?=\S)([^_]+?)_(?!\w)/g, "$1<em>$2</em>");
    })
    .join("");
}
