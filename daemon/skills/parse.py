"""One `SKILL.md`: its front matter, checked, and its body.

The file starts with a front matter block between two `---` lines (YAML), then the body
(Markdown). The front matter's `name` is lowercase kebab-case (letters, digits, single
hyphens) of at most 64 characters, its `description` a non-empty text of at most 240; `paths`
and `autoAttach` are optional globs (one string or a list of strings) naming the files the
skill is about. Other keys (`license`, `allowed-tools`, `metadata`, …) are ignored: skills
written for other agents load as they are.

A file that breaks a rule is a `SkillProblem` saying why, never a skill: it is reported to the
user and never sent to the model. YAML is parsed by PyYAML's safe loader (no tags, no
objects), imported on the first file read so that a daemon without skills never loads it.
"""

import re
from typing import cast

import msgspec

NAME_MAX = 64
DESCRIPTION_MAX = 240
FILE_MAX = 256 * 1024
"""Bytes of a `SKILL.md` beyond which it is ignored (and reported)."""
BODY_MAX = 6000
"""Characters of a body the `skill` tool returns (middle-truncated beyond)."""

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_FENCE = "---"


class SkillProblem(Exception):
    """Why a `SKILL.md` is not a skill, in words for the user."""


class FrontMatter(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    globs: tuple[str, ...] = ()
    """`paths` and `autoAttach` together, in that order."""


def split_front_matter(text: str) -> tuple[str, str]:
    """The front matter's YAML and the body. Raises SkillProblem when the file does not open
    with a `---` line or the block is never closed."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != _FENCE:
        raise SkillProblem("it does not start with a front matter block (a `---` line)")
    for index, line in enumerate(lines[1:], start=1):
        if line.rstrip() in (_FENCE, "..."):
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    raise SkillProblem("its front matter block is not closed (no second `---` line)")


def _load_yaml(source: str) -> object:
    import yaml  # only when a skill file is read

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(source, Loader=loader)  # a safe loader: no tags, no objects
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillProblem(f"its front matter is not valid YAML{line}: {problem}") from None


def _globs(data: dict[str, object], key: str) -> list[str]:
    value = data.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list) and all(isinstance(v, str) for v in cast("list[object]", value)):
        return [v for v in cast("list[str]", value) if v.strip()]
    raise SkillProblem(f"`{key}` must be a glob or a list of globs")


def check_front_matter(source: str) -> FrontMatter:
    """The checked front matter of a skill, from its YAML `source`; SkillProblem otherwise."""
    data = _load_yaml(source)
    if not isinstance(data, dict):
        raise SkillProblem("its front matter is not a set of `key: value` lines")
    fields = cast("dict[str, object]", data)
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise SkillProblem("it has no `name`")
    if len(name) > NAME_MAX:
        raise SkillProblem(f"its name is {len(name)} characters long (at most {NAME_MAX})")
    if not _NAME.fullmatch(name):
        raise SkillProblem(
            f"its name {name!r} is not lowercase kebab-case (letters, digits, single hyphens)"
        )
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillProblem("it has no `description`")
    description = " ".join(description.split())
    if len(description) > DESCRIPTION_MAX:
        raise SkillProblem(
            f"its description is {len(description)} characters long (at most {DESCRIPTION_MAX})"
        )
    globs = (*_globs(fields, "paths"), *_globs(fields, "autoAttach"))
    return FrontMatter(name=name, description=description, globs=globs)


def parse_skill(data: bytes) -> tuple[FrontMatter, str]:
    """The front matter and the body of a `SKILL.md` read as `data`; SkillProblem when it is
    not a skill (too large, not UTF-8, no or bad front matter, a field that breaks a rule)."""
    if len(data) > FILE_MAX:
        raise SkillProblem(f"it is {len(data):,} bytes (at most {FILE_MAX:,})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillProblem("it is not UTF-8 text") from None
    source, body = split_front_matter(text)
    return check_front_matter(source), body.strip()
