"""`file/read`: a window of a text file around a line, for a client that shows a location
(`path:line`) but cannot open files itself (a browser).

Read-only and bounded, and no wider than what the model's read tools reach:
- the path is taken as written (relative to the root, or absolute inside it); a `..` is
  refused, and the file is reached beneath the root without following any symlink
  (`tether.daemon.beneath`), so nothing outside the root is ever opened;
- a credential-like file (`is_credential_path`) is refused outright: the read tools would ask
  the person first, and there is nobody to ask here;
- a file over `MAX_FILE_BYTES` is refused before it is read, a binary one once its head is
  seen, and at most `MAX_BEFORE` + 1 + `MAX_AFTER` lines of at most `MAX_LINE_CHARS` each
  are sent.

Errors: RpcError(INVALID_PARAMS) whose message says why.
"""

import errno
import os
from pathlib import Path, PurePosixPath

from tether.daemon.beneath import FileTooLarge, OutsideWorkspace, read_beneath
from tether.daemon.tools.binary import is_binary
from tether.daemon.tools.credentials import is_credential_path
from tether.daemon.tools.read_file import split_lines
from tether.protocol.errors import ErrorCode, RpcError
from tether.protocol.methods import FileReadParams, FileReadResult

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_BEFORE = 200
MAX_AFTER = 400
MAX_LINE_CHARS = 1000


def read_window(root: Path, params: FileReadParams) -> FileReadResult:
    """The window `params` asks for of a file beneath `root` (a resolved folder). Blocking:
    run it in a thread."""
    shown = params.path
    path = _inside(root, shown)
    relative = path.relative_to(root).as_posix()
    if is_credential_path(relative):
        raise _refused(
            f"{shown} looks like a credential file (keys, tokens, .env); it is not shown here"
        )
    try:
        data, _ = read_beneath(root, path, limit=MAX_FILE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise _refused(f"{shown} does not exist") from None
    except IsADirectoryError:
        raise _refused(f"{shown} is a folder, not a file") from None
    except FileTooLarge as exc:
        raise _refused(
            f"{shown} is {exc.size:,} bytes; files over {MAX_FILE_BYTES // (1024 * 1024)} MB "
            "are not shown"
        ) from None
    except OSError as exc:
        raise _refused(_why(shown, exc)) from None
    if is_binary(data):
        raise _refused(f"{shown} looks like a binary file; it is not shown")
    lines = split_lines(data.decode("utf-8", errors="replace"))
    total = len(lines)
    line = min(max(params.line, 1), max(total, 1))
    start = max(1, line - min(max(params.before, 0), MAX_BEFORE))
    end = min(total, line + min(max(params.after, 0), MAX_AFTER))
    window = lines[start - 1 : end]
    cut = [text[:MAX_LINE_CHARS] for text in window]
    return FileReadResult(
        path=relative,
        start_line=start,
        lines=cut,
        total_lines=total,
        truncated=any(len(text) > MAX_LINE_CHARS for text in window),
    )


def _inside(root: Path, shown: str) -> Path:
    """`shown` as a path inside `root`, taken as written: no `..`, nothing resolved."""
    if not shown or "\x00" in shown:
        raise _refused("`path` must name a file")
    written = PurePosixPath(shown)
    if ".." in written.parts:
        raise _refused(f"{shown} goes up a folder (`..`); give the path inside the root")
    path = Path(os.path.normpath(root / shown))
    if root not in path.parents:
        raise _refused(f"{shown} is not inside {root}; only files inside it are shown")
    return path


def _why(shown: str, exc: OSError) -> str:
    if isinstance(exc, OutsideWorkspace):
        return f"{shown} is not inside the root; only files inside it are shown"
    if exc.errno == errno.ELOOP:
        return f"{shown} is or goes through a symlink; symlinks are not followed here"
    if exc.errno == errno.EINVAL:
        return f"{shown} is not a regular file"
    return f"could not read {shown}: {exc.strerror or exc}"


def _refused(message: str) -> RpcError:
    return RpcError(ErrorCode.INVALID_PARAMS, message)
