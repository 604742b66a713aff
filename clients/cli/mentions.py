"""`@path` mentions in a prompt typed at the CLI: the paths are sent with the turn (the daemon
attaches the files and folders), and the prompt itself is left as typed."""

import re

_MENTION = re.compile(r"""(?:^|(?<=[\s(\[{]))@(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"'@][^\s]*))""")
_TRAILING = ".,;:!?)]}'\""


def parse_cli_mentions(prompt: str) -> list[str]:
    """The paths mentioned in a prompt as `@path`, `@"path with spaces"` or `@'path'`, in
    order, each once. An `@` inside a word (`a@b.com`) is not a mention; punctuation that
    ends a sentence is not part of an unquoted path. The prompt itself is left as typed."""
    found: list[str] = []
    for match in _MENTION.finditer(prompt):
        quoted = match.group(1) or match.group(2)
        if quoted is not None:
            path = quoted
        else:
            path = match.group(3)
            if path not in (".", ".."):
                path = path.rstrip(_TRAILING)
        if path and path not in found:
            found.append(path)
    return found
