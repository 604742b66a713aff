"""Where skills come from, and the set the agent has now.

Sources, lowest first; on a name clash the later one wins (and says what it overrides):

    user        the user's skills folder, `skills/` beside `config.toml`     trusted
    workspace   `.claude/skills/`, then `.agents/skills/`, then
                `.tether/skills/` in the workspace                          asks first

Of the workspace's folders tether's own wins; the vendor-neutral `.agents/skills/` wins over
`.claude/skills/`, which a repository keeps for one other agent. A skill is a folder of a
source holding `SKILL.md` (see `tether.daemon.skills.parse`); other folders are not skills
and are passed over silently. A workspace skill whose folder or `SKILL.md` leads out of the
workspace through a symlink is refused: a cloned repository must not make the agent read
files elsewhere on the machine. At most `MAX_SKILLS` skills, by name; the rest are reported.

`SkillLibrary.refresh` is meant for every turn's start, in a worker thread: it lists the
sources and stats each `SKILL.md`, and parses only files whose stat changed, so an unchanged
set costs a few dozen system calls and returns the very same `SkillSet`. Each problem is
logged once, when it first appears.
"""

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from stat import S_ISLNK

import msgspec

from tether.daemon.beneath import open_beneath
from tether.daemon.logs.log import get_logger
from tether.daemon.skills.parse import (
    BODY_MAX,
    FILE_MAX,
    FrontMatter,
    SkillProblem,
    parse_skill,
)
from tether.daemon.skills.trust import SkillsTrust
from tether.daemon.truncate import middle_truncate
from tether.daemon.workspace import display_path
from tether.protocol.enums import SkillOrigin

log = get_logger(__name__)

Origin = SkillOrigin
MAX_SKILLS = 64
SKILL_FILE = "SKILL.md"
WORKSPACE_FOLDERS = (".claude/skills", ".agents/skills", ".tether/skills")
"""The workspace's skill folders, lowest first."""


class Source(msgspec.Struct, frozen=True, kw_only=True):
    origin: Origin
    folder: Path
    label: str
    """How the folder is named to people: workspace-relative, or `~/…` for the user's."""


class Skill(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    globs: tuple[str, ...]
    origin: Origin
    source: str
    """The label of the source it came from."""
    folder: Path
    """Its folder, symlinks resolved: where its bundled files are looked up."""
    file: Path
    """Its `SKILL.md` as found (in the source, unresolved)."""
    body: str
    """The Markdown body, middle-truncated at `BODY_MAX` characters."""
    body_chars: int
    warnings: tuple[str, ...] = ()


class InvalidSkill(msgspec.Struct, frozen=True, kw_only=True):
    file: Path
    origin: Origin
    reason: str


class SkillSet(msgspec.Struct, frozen=True, kw_only=True):
    skills: tuple[Skill, ...] = ()
    """By name."""
    invalid: tuple[InvalidSkill, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)

    def __bool__(self) -> bool:
        return bool(self.skills)


def _home_label(path: Path) -> str:
    home = Path.home()
    try:
        return f"~/{path.relative_to(home)}"
    except ValueError:
        return str(path)


def sources(workspace: Path, user_folder: Path | None) -> list[Source]:
    """The sources in order, lowest first."""
    found: list[Source] = []
    if user_folder is not None:
        found.append(Source(origin="user", folder=user_folder, label=_home_label(user_folder)))
    found += [
        Source(origin="workspace", folder=workspace / name, label=name)
        for name in WORKSPACE_FOLDERS
    ]
    return found


def protected_folders(workspace: Path, user_folder: Path | None) -> tuple[str, ...]:
    """The skill folders as workspace-relative paths (the user's only when it lies inside the
    workspace): writing into them asks the user whatever the permission mode."""
    folders: list[str] = list(WORKSPACE_FOLDERS)
    if user_folder is not None:
        root = workspace.resolve()
        user = Path(os.path.realpath(user_folder))
        if user == root or root in user.parents:
            folders.append(display_path(root, user))
    return tuple(folders)


_StatKey = tuple[int, int, int, int]
_Parsed = tuple[FrontMatter, str] | SkillProblem


def _stat_key(stat: os.stat_result) -> _StatKey:
    return (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)


class _Candidate(msgspec.Struct, frozen=True):
    source: Source
    folder_name: str
    file: str
    key: _StatKey
    real_folder: str
    escapes: bool
    """A workspace skill whose folder or file resolves outside the workspace."""
    real_file: str = ""
    """Where its `SKILL.md` resolves, when that is a symlink ("": in `real_folder`)."""


class SkillLibrary:
    """The skills of one workspace and the user, kept current by `refresh`."""

    def __init__(
        self, workspace: Path, user_folder: Path | None, trust: SkillsTrust | None = None
    ) -> None:
        """`user_folder`: the user's skills folder (None: no user skills); `trust`: where
        the user's trust in this workspace's skills is remembered (None: in memory only)."""
        self.workspace = workspace
        self.root = workspace.resolve()
        self.user_folder = user_folder
        self.sources = sources(self.root, user_folder)
        self.trust = trust if trust is not None else SkillsTrust(None)
        self.current = SkillSet()
        """The set as of the last `refresh`."""
        self._fingerprint: list[tuple[str, _StatKey, str, bool]] | None = None
        self._parsed: dict[str, tuple[_StatKey, _Parsed]] = {}
        self._logged: set[tuple[Path, str]] = set()
        self._lock = threading.Lock()

    def is_trusted(self, skill: Skill) -> bool:
        return skill.origin == "user" or self.trust.trusted

    def trust_workspace(self, by: str = "") -> None:
        """Remember that the user trusts this workspace's skills (blocking: a small write)."""
        self.trust.grant(by)

    def refresh(self) -> SkillSet:
        """The skills as they are on disk now (blocking: call it in a worker thread; two
        threads may call it at once)."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> SkillSet:
        candidates = [c for source in self.sources for c in self._candidates(source)]
        fingerprint = [(c.file, c.key, c.real_folder, c.escapes) for c in candidates]
        if fingerprint == self._fingerprint:
            return self.current
        self._fingerprint = fingerprint
        self.current = self._build(candidates)
        self._parsed = {c.file: self._parsed[c.file] for c in candidates if c.file in self._parsed}
        for problem in self.current.invalid:
            if (problem.file, problem.reason) not in self._logged:
                self._logged.add((problem.file, problem.reason))
                log.warning("skill ignored", file=problem.file, reason=problem.reason)
        return self.current

    def _inside(self, real: str) -> bool:
        return real.startswith(self._root_prefix)

    @property
    def _root_prefix(self) -> str:
        return os.path.join(str(self.root), "")

    def _candidates(self, source: Source) -> Iterable[_Candidate]:
        # Only what a symlink could move is resolved: the source folder once, then the
        # entries and files that are links themselves (scandir and lstat say which), so an
        # unchanged set costs one listing and one or two stats per skill.
        folder = str(source.folder)
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
            # realpath fails (EINVAL) when a link on the way is swapped while it resolves it.
            real_source = os.path.realpath(folder)
        except OSError:
            return
        workspace = source.origin == "workspace"
        for entry in entries:
            if entry.name.startswith("."):
                continue
            file = os.path.join(entry.path, SKILL_FILE)
            try:
                stat = os.lstat(file)
                if S_ISLNK(stat.st_mode):
                    stat = os.stat(file)
                    real_file = os.path.realpath(file)
                else:
                    real_file = ""
                if entry.is_symlink():
                    real_folder = os.path.realpath(entry.path)
                else:
                    real_folder = os.path.join(real_source, entry.name)
            except OSError:
                continue  # not a skill (or a dangling link): nothing to report
            escapes = workspace and not (
                self._inside(real_folder)
                and self._inside(real_file or os.path.join(real_folder, SKILL_FILE))
            )
            yield _Candidate(
                source, entry.name, file, _stat_key(stat), real_folder, escapes, real_file
            )

    def _parse(self, candidate: _Candidate) -> _Parsed:
        cached = self._parsed.get(candidate.file)
        if cached is not None and cached[0] == candidate.key:
            return cached[1]
        try:
            parsed: _Parsed = parse_skill(self._read(candidate))
        except SkillProblem as exc:
            parsed = exc
        except OSError as exc:
            parsed = SkillProblem(f"it cannot be read: {exc.strerror or exc}")
        self._parsed[candidate.file] = (candidate.key, parsed)
        return parsed

    def _read(self, candidate: _Candidate) -> bytes:
        """The head of a candidate's `SKILL.md`, past `FILE_MAX` by a byte if it is longer. A
        workspace skill's is read where its real path was found, beneath the workspace and
        never through a symlink: one swapped in since is refused (an OSError), not followed."""
        if candidate.source.origin != "workspace":
            with open(candidate.file, "rb") as handle:
                return handle.read(FILE_MAX + 1)
        real = candidate.real_file or os.path.join(candidate.real_folder, SKILL_FILE)
        with open_beneath(self.root, Path(real)) as (handle, _):
            return handle.read(FILE_MAX + 1)

    def _build(self, candidates: list[_Candidate]) -> SkillSet:
        invalid: list[InvalidSkill] = []
        chosen: dict[str, Skill] = {}
        for candidate in candidates:
            origin = candidate.source.origin
            if candidate.escapes:
                invalid.append(
                    InvalidSkill(
                        file=Path(candidate.file),
                        origin=origin,
                        reason="it leads out of the workspace through a symlink",
                    )
                )
                continue
            parsed = self._parse(candidate)
            if isinstance(parsed, SkillProblem):
                invalid.append(
                    InvalidSkill(file=Path(candidate.file), origin=origin, reason=str(parsed))
                )
                continue
            front, body = parsed
            warnings: list[str] = []
            if front.name != candidate.folder_name:
                warnings.append(
                    f"its folder is named {candidate.folder_name!r}, its name is {front.name!r}"
                )
            earlier = chosen.get(front.name)
            if earlier is not None:
                if earlier.source == candidate.source.label:
                    invalid.append(
                        InvalidSkill(
                            file=Path(candidate.file),
                            origin=origin,
                            reason=f"the name {front.name!r} is taken by "
                            f"{earlier.file.parent.name}/ in the same folder",
                        )
                    )
                    continue
                warnings.append(f"it overrides {earlier.file}")
            half = BODY_MAX // 2
            chosen[front.name] = Skill(
                name=front.name,
                description=front.description,
                globs=front.globs,
                origin=origin,
                source=candidate.source.label,
                folder=Path(candidate.real_folder),
                file=Path(candidate.file),
                body=middle_truncate(body, half, BODY_MAX - half),
                body_chars=len(body),
                warnings=tuple(warnings),
            )
        names = sorted(chosen)
        for name in names[MAX_SKILLS:]:
            skill = chosen[name]
            invalid.append(
                InvalidSkill(
                    file=skill.file,
                    origin=skill.origin,
                    reason=f"more than {MAX_SKILLS} skills: the last by name are left out",
                )
            )
        return SkillSet(
            skills=tuple(chosen[name] for name in names[:MAX_SKILLS]), invalid=tuple(invalid)
        )
