"""Which files hold credentials: the names and folders that read rules, searches and the
permission gate treat as secrets, and whether a path or a glob names them.

Names and folders match without regard to case: `.ENV`, `ID_RSA.PEM` and `.SSH/` are as secret
as their lower-case twins (case-insensitive file systems open either spelling)."""

import fnmatch
import re

CREDENTIAL_NAMES = (
    ".env",
    ".env.*",
    "*.env",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    ".dockercfg",
    "credentials",
    "credentials.json",
    "secrets.*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
)


CREDENTIAL_DIRS = (".ssh", ".aws", ".gnupg", ".docker", ".kube")


_CREDENTIAL_NAME = re.compile(
    "|".join(fnmatch.translate(name) for name in CREDENTIAL_NAMES), re.IGNORECASE
)


_CREDENTIAL_DIRS = frozenset(name.casefold() for name in CREDENTIAL_DIRS)


_WILDCARD_RUN = re.compile(r"(?:\*|\?|\[[^/\]]*\])+")


_MAX_GLOB_ALTERNATIVES = 256


def is_credential_path(path: str) -> bool:
    """Whether a `/`-separated path names a credential-like file or lies in a credential
    folder. Cheap enough to run on every path a search finds."""
    parts = [part for part in path.split("/") if part and part != "."]
    if not parts:
        return False
    return _CREDENTIAL_NAME.match(parts[-1]) is not None or not _CREDENTIAL_DIRS.isdisjoint(
        part.casefold() for part in parts
    )


def names_credentials(path: str, glob: str = "") -> bool:
    """Whether a read names credential-like files: its path is one (or lies in a credential
    folder), or its glob names them (`glob_names_credentials`)."""
    return is_credential_path(path) or (bool(glob) and glob_names_credentials(glob))


def glob_names_credentials(glob: str) -> bool:
    """Whether a glob names credential-like files by its own text (`.env`, `**/.env*`,
    `*.pem`, `.ssh/**`, `{.npmrc,README.md}`) rather than merely reaching them through its
    wildcards (`*`, `**/*.json`, `.*`): true when filling every wildcard with nothing, or with
    a plain letter, gives a credential-like path. A negated glob (`!x`) names nothing."""
    if glob.startswith("!"):
        return False
    alternatives = _brace_alternatives(glob)
    if alternatives is None:
        return True  # too many to check: treat it as naming them, so the person is asked
    return any(
        is_credential_path(_WILDCARD_RUN.sub(filler, alternative))
        for alternative in alternatives
        for filler in ("", "x")
    )


def _brace_alternatives(glob: str) -> list[str] | None:
    """`{a,b}` expanded (innermost first); None past _MAX_GLOB_ALTERNATIVES."""
    pending = [glob]
    done: list[str] = []
    while pending:
        text = pending.pop()
        close = text.find("}")
        open_ = text.rfind("{", 0, close) if close != -1 else -1
        if open_ == -1:
            done.append(text)
        else:
            head, body, tail = text[:open_], text[open_ + 1 : close], text[close + 1 :]
            pending.extend(f"{head}{option}{tail}" for option in body.split(","))
        if len(done) + len(pending) > _MAX_GLOB_ALTERNATIVES:
            return None
    return done
