"""What a shell command line runs, as the permission gate sees it.

A command line is parsed with bash's grammar (tree-sitter-bash; commands run under bash, see
`tether.daemon.procs.shell`) into the simple commands it runs and their words. Nothing is
matched against the raw text.

Rules:
- A word is a literal (quotes removed: `'a; b'` is the word `a; b`) or dynamic (`None`): a
  variable (`$HOME`, `${HOME}`), a glob (`*.py`), a tilde (`~/x`) or a brace expansion, whose
  value the gate cannot know. A rule's `*` may stand for dynamic words; nothing else matches
  them.
- A command line is *plain* when it is a sequence of simple commands joined by `;`, `&&`,
  `||`, newlines and pipes, each a program named by a literal followed by words, with no
  command or process substitution, no arithmetic, no parameter expansion with operators, no
  variable assignment, no background `&`, no compound command (subshell, `{ }`, `if`, loops,
  functions, `[[ ]]`), no builtin that changes the shell or evaluates code (`eval`, `source`,
  `.`, `trap`, `export`, `cd` is allowed, …), no output redirection to a file outside the
  workspace and no code fed to an interpreter on its standard input. The files redirections
  write are listed (`writes`), for the gate to judge as edits. Anything else has a
  `problem`: the gate then asks, unless a rule names the whole command line exactly.
- `bash -c STRING`, `sh -c STRING` and `eval WORDS` are judged as what they run: the commands
  of their (literal) string take their place. `xargs`, `find -exec`, `env` with options or
  variables and other shells' `-c` are not plain; the commands they run are still listed, for
  deny and ask rules.
- Each simple command has two forms: `words`, what an allow rule must match (only the wrappers
  that just run the rest are dropped: `command`, `builtin`, `exec`, `nohup`, `time`, a bare
  `env`), and `normal`, what deny and ask rules also match: variable assignments, wrappers
  (also `env`, `timeout`, `nice`, `sudo`, `xargs`, …) and git's global options (`-C`, `-c`,
  `--git-dir`, …) folded away, the program named by its base name. So `GIT_TRACE=0 command
  /usr/bin/git -C . push` is `git push` to a deny rule, and only its own words to an allow rule.
- A line tree-sitter cannot parse has a problem. The parser is imported on first use and
  kept; analyses are cached by text.
"""

import fnmatch
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

Word = str | None
"""A literal word, or None for a word whose value is only known when the shell runs."""

MAX_DEPTH = 4
"""How deep `bash -c` and `eval` strings are followed before the line is no longer plain."""

STATEMENTS = frozenset(
    {
        "command", "list", "pipeline", "redirected_statement", "negated_command", "subshell",
        "compound_statement", "if_statement", "while_statement", "for_statement",
        "c_style_for_statement", "case_statement", "function_definition", "test_command",
        "variable_assignment", "variable_assignments", "declaration_command", "unset_command",
    }
)  # fmt: skip

SHELL_CHANGING_BUILTINS = frozenset(
    {
        "eval", "source", ".", "trap", "let", "declare", "typeset", "local", "readonly",
        "export", "alias", "unalias", "set", "shopt", "enable", "hash", "fc", "bind",
        "complete", "compgen", "compopt", "mapfile", "readarray", "read", "unset", "getopts",
        "wait", "umask", "ulimit", "coproc", "exec", "caller", "history", "builtin",
    }
)  # fmt: skip
"""Builtins that change the shell or evaluate code the gate cannot see (array subscripts
in their arguments are evaluated, `source` runs a file); `exec` and `builtin` count only when
they do not simply run the program after them."""

INTERPRETERS = (
    "python*", "pypy*", "py", "node", "nodejs", "deno", "bun", "ruby", "irb", "perl", "php",
    "lua*", "Rscript", "julia", "bash", "sh", "zsh", "fish", "dash", "ksh", "csh", "tcsh",
    "pwsh", "powershell", "osascript", "tclsh", "awk", "gawk", "mawk", "nawk", "sed", "gsed",
    "xargs", "source",
)  # fmt: skip
"""Programs that run code they read, on standard input too (fnmatch patterns of base names)."""

RESERVED_WORDS = frozenset(
    {"!", "{", "}", "[[", "]]", "if", "then", "else", "elif", "fi", "do", "done", "case", "esac",
     "while", "until", "for", "select", "in", "function", "time", "coproc"}
)  # fmt: skip
"""Words bash reads as syntax where a program's name would be (`time { touch x; }` runs a
group): tree-sitter-bash takes some of them for a program, the gate asks."""

POSIX_SHELLS = frozenset({"bash", "sh", "dash"})
"""Shells whose `-c` string is judged with bash's grammar."""
OTHER_SHELLS = frozenset({"zsh", "fish", "ksh", "mksh", "csh", "tcsh", "pwsh", "powershell"})

_RUNNERS = frozenset({"command", "builtin", "exec", "nohup", "time"})
"""Wrappers that run the program after them and nothing else."""
_RUNNER_OPTIONS: dict[str, tuple[str, ...]] = {
    "command": ("-p", "--"),
    "time": ("-p", "--"),
    "nohup": ("--",),
    "builtin": ("--",),
    "exec": ("--",),
}
"""The options of a runner that leave it a runner."""
_CD = frozenset({"cd", "pushd", "popd"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_OUTPUT_OK = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_UNQUOTED_BAD = frozenset("$`'\"()<>|&;")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SPLIT_WORD = re.compile(r"[^\s\\]\\\n[^\s]")
"""A backslash-newline with a word's characters on both sides."""

_GIT_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env",
     "--super-prefix", "--attr-source", "--list-cmds"}
)  # fmt: skip
"""git's global options that take a value in the next word."""

# Options of the wrappers `normal` folds away that take a value in the next word.
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "exec": frozenset({"-a"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U"}),
    "doas": frozenset({"-u", "-C"}),
    "xargs": frozenset({"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--arg-file"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "git": _GIT_VALUE_OPTIONS,
}
_WRAPPERS = frozenset(
    {"command", "builtin", "exec", "nohup", "time", "env", "timeout", "nice", "sudo", "doas",
     "xargs", "setsid", "stdbuf"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    words: tuple[Word, ...]
    """The words an allow rule must match (see the module's rules)."""
    normal: tuple[Word, ...]
    """The words deny and ask rules also match: assignments, wrappers and git's global options
    folded away, the program by its base name."""
    wrapper: bool = False
    """It only runs the commands listed after it (`bash -c STRING`, `eval`): deny and ask
    rules match it, allow rules need not (the commands it runs are judged instead)."""


@dataclass(frozen=True, slots=True)
class CommandLine:
    """A command line analysed: every simple command it would run (those inside substitutions,
    `bash -c` strings, `find -exec` and `xargs` too), and why it is not plain ("" when it is)."""

    text: str
    commands: tuple[SimpleCommand, ...]
    problem: str
    writes: tuple[str, ...] = ()
    """The files its output redirections write, relative to where it starts (all below it:
    one elsewhere is a problem)."""

    @property
    def plain(self) -> bool:
        return not self.problem


def is_interpreter(program: str) -> bool:
    name = PurePosixPath(program).name
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in INTERPRETERS)


@functools.cache
def _parser() -> "Parser":
    # Imported here: tree-sitter costs tens of milliseconds that a daemon's start and a turn
    # without commands do not pay.
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def parse_tree(text: str) -> "Node":
    """The root of `text`'s bash syntax tree."""
    return _parser().parse(text.encode()).root_node


@functools.lru_cache(maxsize=512)
def analyse(text: str) -> CommandLine:
    """The simple commands `text` runs and why it is not plain (see the module's rules)."""
    walk = _Walk()
    try:
        walk.line(text)
    except RecursionError:
        walk.problem("the command nests too deeply to judge")
    problem = walk.problems[0] if walk.problems else ""
    if not problem and all(command.wrapper for command in walk.commands):
        problem = "the command runs nothing the gate can name"
    return CommandLine(
        text=text, commands=tuple(walk.commands), problem=problem, writes=tuple(walk.writes)
    )


# --- words -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Chars:
    """A word's characters, each marked quoted or not; `dynamic` once an expansion is in it."""

    chars: list[tuple[str, bool]] = field(default_factory=list[tuple[str, bool]])
    dynamic: bool = False

    def add(self, text: str, quoted: bool) -> None:
        self.chars.extend((c, quoted) for c in text)

    @property
    def text(self) -> str:
        return "".join(c for c, _ in self.chars)

    def expands(self) -> bool:
        """The unquoted characters make a glob, a tilde or a brace expansion."""
        unquoted = "".join(c if not quoted else "\x00" for c, quoted in self.chars)
        if "*" in unquoted or "?" in unquoted:
            return True
        if _BRACKETS.search(unquoted) or _BRACES.search(unquoted):
            return True
        return unquoted.startswith("~") or bool(_TILDE.search(unquoted))


# Over a word's characters with the quoted ones blanked out (NUL).
_BRACKETS = re.compile(r"\[.*\]")
"""A bracket glob (`[ab]`); a lone `[` (the test program) is literal."""
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
"""A brace expansion (`{a,b}`, `{1..3}`); `{}` (find's) is literal."""
_TILDE = re.compile(r"[=:]~")
"""A tilde bash expands after `=` or `:` (`--prefix=~/x`, `PATH=a:~/b`)."""


def _unquoted(text: str, into: _Chars) -> bool:
    """Add the unquoted word text to `into`, removing backslashes; False when it holds a
    character that tree-sitter should not have left in a word."""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 < len(text):
                if text[i + 1] != "\n":
                    into.add(text[i + 1], True)
                i += 2
                continue
            into.add(c, True)
        elif c in _UNQUOTED_BAD or c.isspace():
            return False
        else:
            into.add(c, False)
        i += 1
    return True


def _double_quoted(text: str, into: _Chars) -> None:
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                into.add(text[i + 1], True)
            i += 2
            continue
        into.add(c, True)
        i += 1


def _text(node: "Node") -> str:
    raw = node.text
    return raw.decode(errors="replace") if raw is not None else ""


# --- the walk ----------------------------------------------------------------------------


class _Walk:
    def __init__(self) -> None:
        self.commands: list[SimpleCommand] = []
        self.problems: list[str] = []
        self.folder: PurePosixPath | None = PurePosixPath()
        """Where the line's commands run now, relative to where it started (None: a `cd`
        took them somewhere the gate cannot follow)."""
        self.writes: list[str] = []
        self.depth = 0
        """How many `bash -c` or `eval` strings the walk is inside."""

    def problem(self, why: str) -> None:
        if why not in self.problems:
            self.problems.append(why)

    def line(self, text: str) -> None:
        if self.depth > MAX_DEPTH:
            self.problem("commands nest too deeply to judge")
            return
        root = parse_tree(text)
        if root.has_error:
            self.problem("the gate cannot parse the command")
        if _SPLIT_WORD.search(text):
            # bash joins `to\<newline>uch` into one word; tree-sitter-bash splits it in two.
            self.problem("a line continuation splits a word of the command")
        self.statements(root)

    def nested(self, text: str) -> None:
        """The commands of a string the shell runs (`bash -c`, `eval`), judged here."""
        self.depth += 1
        try:
            self.line(text)
        finally:
            self.depth -= 1

    def statements(self, node: "Node") -> None:
        for child in node.children:
            if child.type == "&":
                self.problem("the command runs something in the background (&)")
            elif child.is_named:
                self.statement(child, piped=False)

    def statement(self, node: "Node", *, piped: bool) -> None:
        kind = node.type
        if kind == "command":
            self.simple(node, stdin=piped, redirects=())
        elif kind == "list":
            for child in node.named_children:
                self.statement(child, piped=False)
        elif kind == "pipeline":
            for index, child in enumerate(node.named_children):
                self.statement(child, piped=piped or index > 0)
        elif kind == "negated_command":
            for child in node.named_children:
                self.statement(child, piped=piped)
        elif kind == "redirected_statement":
            body = node.child_by_field_name("body")
            redirects = [c for c in node.named_children if c != body]
            if body is not None and body.type == "command":
                self.simple(body, stdin=piped, redirects=redirects)
                return
            if body is None:
                self.problem("the command redirects nothing")
            else:
                # tree-sitter-bash hangs the last command's redirections on the whole list
                # or pipeline (`cd x && echo y > f`); bash gives them to that last command.
                self.statement(body, piped=piped)
            fed = False
            for redirect in redirects:
                fed = self.redirect(redirect) or fed
            last = self.commands[-1].words[0] if self.commands else None
            if fed and last is not None and is_interpreter(last):
                self.problem(f"the command feeds code to {last} on its standard input")
        elif kind == "comment":
            pass
        elif kind in ("ERROR", "heredoc_body"):
            self.problem("the gate cannot parse the command")
            self.inner(node)
        else:
            self.problem(f"the command uses shell syntax that is not a plain command ({kind})")
            self.inner(node)

    def inner(self, node: "Node") -> None:
        """The statements and words anywhere under a node the gate does not judge as a whole:
        listed for deny and ask rules."""
        for child in node.named_children:
            if child.type in STATEMENTS:
                self.statement(child, piped=False)
            elif child.type in ("command_substitution", "process_substitution"):
                self.substitution(child)
            else:
                self.inner(child)

    def substitution(self, node: "Node") -> None:
        self.problem("the command runs a command or process substitution")
        self.inner(node)

    # A word: its literal value, None when dynamic; problems are recorded on the way.
    def word(self, node: "Node") -> Word:
        chars = _Chars()
        if not self._chars(node, chars, quoted=False):
            return None
        if chars.dynamic or chars.expands():
            return None
        return chars.text

    def pattern(self, node: "Node") -> _Chars | None:
        """A rule's word: its characters with quoting kept (None: not a literal pattern)."""
        chars = _Chars()
        if not self._chars(node, chars, quoted=False) or chars.dynamic:
            return None
        return chars

    def _chars(self, node: "Node", into: _Chars, *, quoted: bool) -> bool:
        kind = node.type
        text = _text(node)
        if kind in ("word", "number") and not quoted:
            if not _unquoted(text, into):
                self.problem("the gate cannot read a word of the command")
                return False
            return True
        if kind == "raw_string":
            into.add(text[1:-1], True)
            return True
        if kind == "string_content":
            _double_quoted(text, into)
            return True
        if kind in ("string", "concatenation"):
            inside_quotes = quoted or kind == "string"
            ok = True
            for child in node.children:
                if child.type == '"':
                    continue
                ok = self._chars(child, into, quoted=inside_quotes) and ok
            return ok
        if kind == "simple_expansion" or (
            kind == "expansion" and [c.type for c in node.children] == ["${", "variable_name", "}"]
        ):
            into.dynamic = True
            return True
        if kind in ("ansi_c_string", "translated_string", "brace_expression"):
            into.dynamic = True
            return True
        if kind in ("command_substitution", "process_substitution"):
            self.substitution(node)
            into.dynamic = True
            return False
        if kind in ("expansion", "arithmetic_expansion"):
            self.problem("the command uses an expansion that can evaluate code")
            self.inner(node)
            into.dynamic = True
            return False
        self.problem(f"the gate cannot read a word of the command ({kind})")
        self.inner(node)
        return False

    # --- simple commands ---

    def simple(self, node: "Node", *, stdin: bool, redirects: Sequence["Node"]) -> None:
        words: list[Word] = []
        assigned = False
        fed = stdin
        for child in node.named_children:
            kind = child.type
            if kind == "variable_assignment":
                assigned = True
                value = child.child_by_field_name("value")
                if value is not None:
                    self.word(value)
            elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                fed = self.redirect(child) or fed
            elif kind == "command_name":
                words.extend(self.word(c) for c in child.named_children)
            elif kind == "comment":
                pass
            else:
                words.append(self.word(child))
        for redirect in redirects:
            fed = self.redirect(redirect) or fed
        if assigned:
            self.problem("the command sets environment variables for the program it runs")
        self.command(words, fed=fed)

    def redirect(self, node: "Node") -> bool:
        """Judge one redirection; True when it feeds the command's standard input."""
        kind = node.type
        if kind == "herestring_redirect":
            for child in node.named_children:
                self.word(child)
            return True
        if kind == "heredoc_redirect":
            for child in node.named_children:
                if child.type == "heredoc_body":
                    if any(c.type != "heredoc_content" for c in child.named_children):
                        self.problem("a here-document of the command expands its text")
                        self.inner(child)
                elif child.type == "file_redirect":
                    self.redirect(child)
                elif child.type not in ("heredoc_start", "heredoc_end"):
                    self.problem("the command continues after a here-document's first line")
                    self.inner(child)
            return True
        operator = ""
        target: Node | None = None
        for child in node.children:
            if child.type == "file_descriptor":
                continue
            if not child.is_named:
                operator += child.type
            elif target is None:
                target = child
        if target is None:
            return False
        value = self.word(target)
        if operator in ("<", "<&", "<&-"):
            return operator == "<"
        if operator in (">&", "<&", ">&-") and (value is None or value.isdigit() or value == "-"):
            if value is None:
                self.problem("the command redirects its output to a file the gate cannot name")
            return False
        if value in _OUTPUT_OK:
            return False
        inside = self._inside(value)
        if inside is None:
            self.problem("the command writes to a file outside the workspace")
        else:
            self.writes.append(str(inside))
        return False

    def _inside(self, path: Word) -> PurePosixPath | None:
        """`path` relative to where the line started, when it stays below it."""
        if path is None or self.folder is None or path.startswith(("/", "~")):
            return None
        relative = PurePosixPath(path)
        if not relative.parts or ".." in relative.parts:
            return None
        return self.folder / relative

    def command(self, words: list[Word], *, fed: bool) -> None:
        if not words:
            return
        program = words[0]
        if program is None:
            self.problem("the program's name comes from an expansion")
            self.commands.append(SimpleCommand(words=tuple(words), normal=tuple(words)))
            return
        allowed = _strip_runners(words)
        name = allowed[0]
        normal = normal_words(words)
        if name is not None and self._runs_inner(name, allowed):
            self.commands.append(SimpleCommand(words=tuple(allowed), normal=normal, wrapper=True))
            return
        self.commands.append(SimpleCommand(words=tuple(allowed), normal=normal))
        base = PurePosixPath(name).name if name is not None else ""
        if name is None:
            self.problem("the program's name comes from an expansion")
        elif name in RESERVED_WORDS:
            self.problem(f"the command uses the shell keyword `{name}` where a program goes")
        elif name in SHELL_CHANGING_BUILTINS:
            self.problem(f"`{name}` changes the shell or runs code the gate cannot see")
        elif name == "env" and len(allowed) > 1:
            self.problem("`env` changes the environment of the program it runs")
            self.listed(normal)
        elif base == "xargs":
            self.problem("xargs runs a command with arguments read from its input")
            self.listed(normal)
        elif base in ("find", "gfind") and _FIND_EXEC & {w for w in allowed if w}:
            self.problem("find runs a command for each file it finds")
            self._find_exec(allowed)
        elif base in OTHER_SHELLS and "-c" in allowed:
            self.problem(f"the command runs code in another shell ({base})")
            self._shell_string(allowed, judged=False)
        elif name in ("printf", "test", "[") and "-v" in allowed:
            self.problem(f"`{name} -v` evaluates the name it is given")
        elif fed and is_interpreter(name):
            self.problem(f"the command feeds code to {base} on its standard input")
        if name in _CD:
            self.folder = self._inside(allowed[1]) if len(allowed) > 1 else None

    def listed(self, normal: tuple[Word, ...]) -> None:
        """`normal` is what a wrapper runs: listed once more, for deny and ask rules."""
        if len(normal) and normal[0] is not None:
            self.commands.append(SimpleCommand(words=normal, normal=normal))

    def _find_exec(self, words: list[Word]) -> None:
        current: list[Word] | None = None
        for word in words:
            if current is None:
                if word in _FIND_EXEC:
                    current = []
            elif word in (";", "+"):
                if current:
                    self.listed(normal_words(current))
                current = None
            else:
                current.append(word)
        if current:
            self.listed(normal_words(current))

    def _runs_inner(self, name: str, words: list[Word]) -> bool:
        """`bash -c STRING`, `sh -c STRING` and `eval WORDS` are replaced by what they run."""
        if name == "eval":
            if len(words) > 1 and all(w is not None for w in words[1:]):
                self.nested(" ".join(w for w in words[1:] if w is not None))
                return True
            return False
        if PurePosixPath(name).name in POSIX_SHELLS:
            return self._shell_string(words, judged=True)
        return False

    def _shell_string(self, words: list[Word], *, judged: bool) -> bool:
        for index, word in enumerate(words[1:], start=1):
            if word is None or not word.startswith("-"):
                return False
            if word.startswith("--"):
                continue
            if "c" in word[1:]:
                after = words[index + 1 :]
                if after[:1] == ["--"]:
                    after = after[1:]
                code = after[0] if after else None
                if code is None:
                    self.problem("the command runs shell code the gate cannot read")
                    return False
                if judged:
                    self.nested(code)
                    return True
                apart = _Walk()
                apart.depth = self.depth + 1
                apart.line(code)
                self.commands.extend(apart.commands)
                return True
        return False


def _strip_runners(words: list[Word]) -> list[Word]:
    """`words` without the wrappers that only run the rest (`command git status`, `time -p
    make`); `command -v` (a question, not a run) and `exec` with options stay."""
    rest = words
    while len(rest) > 1 and rest[0] in _RUNNERS:
        skip = 1
        while skip < len(rest) and rest[skip] in _RUNNER_OPTIONS.get(rest[0] or "", ()):
            skip += 1
        following = rest[skip] if skip < len(rest) else None
        if following is None or following.startswith("-"):
            break
        rest = rest[skip:]
    if len(rest) > 1 and rest[0] == "env":
        following = rest[1]
        if following is not None and not following.startswith("-") and "=" not in following:
            rest = rest[1:]
    return rest


def normal_words(words: Sequence[Word]) -> tuple[Word, ...]:
    """The words deny and ask rules match (see the module's rules)."""
    rest = list(words)
    while rest and rest[0] is not None:
        name = PurePosixPath(rest[0]).name
        if name not in _WRAPPERS:
            break
        rest = _after_options(name, rest[1:])
        if name == "env":
            while rest and rest[0] is not None and _is_assignment(rest[0]):
                rest = rest[1:]
        elif name == "timeout" and rest:
            rest = rest[1:]  # the duration
    if not rest or rest[0] is None:
        return tuple(rest)
    program = PurePosixPath(rest[0]).name
    rest[0] = program
    if program == "git":
        rest = [program, *_after_options("git", rest[1:])]
    return tuple(rest)


def _after_options(program: str, words: list[Word]) -> list[Word]:
    takes_value = _VALUE_OPTIONS.get(program, frozenset[str]())
    index = 0
    while index < len(words):
        word = words[index]
        if word is None or not word.startswith("-") or word == "-":
            break
        index += 1
        if word == "--":
            break
        if word in takes_value:
            index += 1
    return words[index:]


def _is_assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and bool(_NAME.match(name))


# --- rule patterns -----------------------------------------------------------------------


STAR = "\x00*"
"""A pattern word that is a bare `*`: any run of words, dynamic ones too."""


@functools.lru_cache(maxsize=512)
def pattern_words(pattern: str) -> tuple[str, ...] | None:
    """A rule's pattern as fnmatch patterns, one a word (`STAR` for a bare `*`; quoted
    characters match only themselves), or None when it is not one simple command of literal
    words (such a rule names a command line only by its whole text)."""
    root = parse_tree(pattern)
    if root.has_error:
        return None
    statements = [c for c in root.named_children if c.type != "comment"]
    if len(statements) != 1 or statements[0].type != "command":
        return None
    try:
        return _pattern_of(statements[0])
    except RecursionError:
        return None


def _pattern_of(command: "Node") -> tuple[str, ...] | None:
    walk = _Walk()
    found: list[str] = []
    for child in command.named_children:
        nodes = child.named_children if child.type == "command_name" else [child]
        for node in nodes:
            chars = walk.pattern(node)
            if chars is None or walk.problems:
                return None
            found.append(_fnmatch_pattern(chars))
    return tuple(found)


def _fnmatch_pattern(chars: _Chars) -> str:
    if chars.chars == [("*", False)]:
        return STAR
    out: list[str] = []
    for c, quoted in chars.chars:
        out.append(f"[{c}]" if quoted and c in "*?[" else c)
    return "".join(out)


def words_match(patterns: Sequence[str], words: Sequence[Word]) -> bool:
    """Whether the pattern words match the command's words (`STAR` matches any run)."""
    reached = _past_stars(patterns, [True] + [False] * len(patterns))
    for word in words:
        following = [False] * (len(patterns) + 1)
        for index, pattern in enumerate(patterns):
            if not reached[index]:
                continue
            if pattern == STAR:
                following[index] = True
            elif word is not None and fnmatch.fnmatchcase(word, pattern):
                following[index + 1] = True
        reached = _past_stars(patterns, following)
        if not any(reached):
            return False
    return reached[-1]


def _past_stars(patterns: Sequence[str], reached: list[bool]) -> list[bool]:
    """`reached` (which pattern words the match may be at) with every `STAR` also skipped."""
    for index, pattern in enumerate(patterns):
        if reached[index] and pattern == STAR:
            reached[index + 1] = True
    return reached
