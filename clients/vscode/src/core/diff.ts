// The two sides of an edit, for VS Code's diff editor, from the unified diff a tool call
// carries (`ToolCall.diff`: paths `a/x` and `b/x`, `/dev/null` for a created or deleted file).
//
// A unified diff holds only the changed lines and their context. When the file on disk still
// reads as the diff's new side at every hunk, the whole file is shown: the new side is the
// file, the old side the file with each hunk put back (`whole: true`). Otherwise (the file
// changed since, or is gone) the diff editor shows the hunks alone, one after the other,
// separated by a line that says which lines follow.
//
// An edit still waiting for approval is the other way round: the file on disk should read as
// the diff's old side, and the new side is the file with each hunk applied
// (`proposedDocuments`).

export interface Hunk {
  oldStart: number;
  newStart: number;
  /** The hunk's lines without their ' ', '-' or '+' mark, per side. */
  oldLines: string[];
  newLines: string[];
}

export interface ParsedDiff {
  /** Relative to the workspace; the new path, or the old one for a deleted file. */
  path: string;
  created: boolean;
  deleted: boolean;
  hunks: Hunk[];
}

export interface DiffDocuments {
  path: string;
  before: string;
  after: string;
  /** Whether `before` and `after` are the whole file (else the hunks alone). */
  whole: boolean;
}

const HUNK = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;

/** Parse a one-file unified diff; throws on text that has no hunk. */
export function parseUnifiedDiff(diff: string): ParsedDiff {
  let oldPath = "";
  let newPath = "";
  const hunks: Hunk[] = [];
  let hunk: Hunk | null = null;
  // The last line's newline ends it; it does not start an empty context line.
  for (const line of diff.replace(/\r\n/g, "\n").replace(/\n$/, "").split("\n")) {
    if (hunk === null && line.startsWith("--- ")) {
      oldPath = stripPrefix(line.slice(4), "a/");
      continue;
    }
    if (hunk === null && line.startsWith("+++ ")) {
      newPath = stripPrefix(line.slice(4), "b/");
      continue;
    }
    const header = HUNK.exec(line);
    if (header) {
      hunk = { oldStart: Number(header[1]), newStart: Number(header[3]), oldLines: [], newLines: [] };
      hunks.push(hunk);
      continue;
    }
    if (hunk === null || line.startsWith("\\")) continue; // "\ No newline at end of file"
    const mark = line[0];
    const text = line.slice(1);
    if (mark === " " || line === "") {
      hunk.oldLines.push(text);
      hunk.newLines.push(text);
    } else if (mark === "-") {
      hunk.oldLines.push(text);
    } else if (mark === "+") {
      hunk.newLines.push(text);
    }
  }
  if (hunks.length === 0) throw new Error("not a unified diff: it has no hunk");
  const created = oldPath === "/dev/null";
  const deleted = newPath === "/dev/null";
  return { path: deleted ? oldPath : newPath || oldPath, created, deleted, hunks };
}

function stripPrefix(path: string, prefix: string): string {
  const name = path.split("\t")[0]!.trim();
  return name.startsWith(prefix) ? name.slice(prefix.length) : name;
}

/**
 * The documents to compare for `diff`; `current` is the file's text on disk now (null: it
 * cannot be read).
 */
export function diffDocuments(diff: string, current: string | null): DiffDocuments {
  const parsed = parseUnifiedDiff(diff);
  if (current !== null && !parsed.deleted) {
    const before = replaceHunks(parsed.hunks, current, "new");
    if (before !== null) return { path: parsed.path, before: parsed.created ? "" : before, after: current, whole: true };
  }
  return hunksAlone(parsed);
}

/**
 * The documents for an edit not made yet (a pending approval's `preview`): the file as it is
 * (`current`, null when it cannot be read or does not exist) and as the edit would leave it.
 */
export function proposedDocuments(diff: string, current: string | null): DiffDocuments {
  const parsed = parseUnifiedDiff(diff);
  if (parsed.created && (current === null || current === "")) {
    return { path: parsed.path, before: "", after: parsed.hunks.flatMap((h) => h.newLines).join("\n") + "\n", whole: true };
  }
  if (current !== null) {
    const after = parsed.deleted ? "" : replaceHunks(parsed.hunks, current, "old");
    if (after !== null) return { path: parsed.path, before: current, after, whole: true };
  }
  return hunksAlone(parsed);
}

function hunksAlone(parsed: ParsedDiff): DiffDocuments {
  const side = (lines: (h: Hunk) => string[], start: (h: Hunk) => number): string =>
    parsed.hunks.map((h) => [`⋯ from line ${start(h)}`, ...lines(h)].join("\n")).join("\n");
  return {
    path: parsed.path,
    before: parsed.created ? "" : side((h) => h.oldLines, (h) => h.oldStart),
    after: parsed.deleted ? "" : side((h) => h.newLines, (h) => h.newStart),
    whole: false,
  };
}

/**
 * `current` with each hunk's `found` side replaced by its other side, or null when a hunk's
 * `found` side is not there.
 */
function replaceHunks(hunks: Hunk[], current: string, found: "old" | "new"): string | null {
  const lines = current.split("\n");
  const out: string[] = [];
  let at = 0; // index in `lines` of the next line not yet copied
  for (const hunk of hunks) {
    const [have, want, haveStart] =
      found === "new" ? [hunk.newLines, hunk.oldLines, hunk.newStart] : [hunk.oldLines, hunk.newLines, hunk.oldStart];
    // A hunk whose side is an empty range starts after that line number, not at it.
    const start = have.length === 0 ? haveStart : haveStart - 1;
    if (start < at) return null;
    for (let k = 0; k < have.length; k += 1) {
      if (lines[start + k] !== have[k]) return null;
    }
    out.push(...lines.slice(at, start), ...want);
    at = start + have.length;
  }
  out.push(...lines.slice(at));
  return out.join("\n");
}
