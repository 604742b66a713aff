"""skill: the second and third stage of a skill, its instructions or one of its files.

The system prompt's catalog names the skills (`tether.daemon.skills.catalog`); this tool
returns a skill's body (`BODY_MAX` characters, middle-truncated) followed by the files its
folder bundles, or, with `resource`, one of those files (`RESOURCE_MAX` characters,
middle-truncated), resolved inside the skill's folder (`tether.daemon.skills.resources`).
It is offered only while skills exist. It reads the skills as the turn found them at its
start (`SkillLibrary.current`).

A workspace skill is used only once the user trusts the workspace's skills: until then the
call carries a trust question (`trust_question`), which the permission gate asks whatever
the mode, and a yes is remembered for the workspace (`trust_granted`).
"""

import errno
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.beneath import FileTooLarge, read_beneath
from tether.daemon.skills.library import Skill, SkillLibrary
from tether.daemon.skills.parse import BODY_MAX
from tether.daemon.skills.resources import ResourceRefused, bundled_files, resolve_resource
from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolParams
from tether.daemon.tools.binary import is_binary
from tether.daemon.truncate import middle_truncate

RESOURCE_MAX = 12_000
RESOURCE_READ_MAX = 10 * 1024 * 1024
"""Bytes of a bundled file beyond which it is refused rather than read."""


class SkillParams(ToolParams, frozen=True, kw_only=True):
    name: Annotated[
        str, msgspec.Meta(description="The skill's name, as the skills catalog lists it.")
    ]
    resource: Annotated[
        str,
        msgspec.Meta(
            description="A file of the skill's folder to read instead of its instructions, "
            "relative to that folder (as the instructions name it). Leave it out to get the "
            "instructions."
        ),
    ] = ""


class SkillTool:
    name: ClassVar[str] = "skill"
    description: ClassVar[str] = (
        "Load a skill listed in the system prompt's skills catalog: its instructions "
        f"(at most {BODY_MAX:,} characters, the middle cut beyond) and the list of files its "
        "folder bundles; with `resource`, one of those files, relative to the skill's folder "
        f"(at most {RESOURCE_MAX:,} characters, the middle cut beyond; absolute paths and `..` "
        "are refused). Read a skill's instructions before doing the task it describes."
    )
    kind: ClassVar[ToolKind] = "read"
    params: ClassVar[type[ToolParams]] = SkillParams

    def __init__(self, library: SkillLibrary) -> None:
        self.library = library

    def _skill(self, params: SkillParams) -> Skill | None:
        return self.library.current.get(params.name.strip())

    def trust_question(self, params: SkillParams) -> str:
        skill = self._skill(params)
        if skill is None or self.library.is_trusted(skill):
            return ""
        return (
            f"the skill {skill.name} comes from the repository ({skill.source}/); a yes "
            "trusts this workspace's skills from now on"
        )

    async def trust_granted(self, params: SkillParams, by: str) -> None:
        await trio.to_thread.run_sync(self.library.trust_workspace, by)

    async def run(self, params: SkillParams, ctx: ToolContext) -> str:
        skill = self._skill(params)
        if skill is None:
            known = ", ".join(s.name for s in self.library.current.skills) or "none"
            raise ToolFailure(f"No skill is named {params.name!r}. The skills: {known}.")
        if self.trust_question(params):
            raise ToolFailure(f"The skill {skill.name} is not trusted yet; nothing was read.")
        # A repository's skill is read beneath the workspace, from descriptors: a folder
        # swapped for a symlink since the skill was found is not followed.
        root = ctx.workspace.resolve() if skill.origin == "workspace" else skill.folder
        if params.resource:
            return await trio.to_thread.run_sync(_read_resource, root, skill, params.resource)
        return await trio.to_thread.run_sync(_instructions, root, skill)


def _instructions(root: Path, skill: Skill) -> str:
    files, more = bundled_files(root, skill.folder)
    origin = "repository" if skill.origin == "workspace" else "user"
    where = f"{skill.source}/{skill.file.parent.name}"
    parts = [f'<skill name="{skill.name}" from="{origin}" source="{where}">']
    # The body cannot close the frame early and pass what follows for tether's own words.
    body = skill.body.replace("</skill>", "&lt;/skill>")
    parts.append(body or "(The skill's instructions are empty.)")
    if files:
        listing = "\n".join(f"- {file}" for file in files)
        if more:
            listing += f"\n- … and {more} more"
        parts.append(f"Files in the skill's folder (read one with `resource`):\n{listing}")
    parts.append("</skill>")
    return "\n\n".join(parts)


def _read_resource(root: Path, skill: Skill, resource: str) -> str:
    try:
        path = resolve_resource(skill.folder, resource)
    except ResourceRefused as exc:
        raise ToolFailure(str(exc)) from None
    if not path.is_file():
        files, _more = bundled_files(root, skill.folder)
        shown = ", ".join(files) or "none"
        raise ToolFailure(f"The skill {skill.name} has no file {resource!r}. Its files: {shown}.")
    try:
        data, _ = read_beneath(root, path, limit=RESOURCE_READ_MAX)
    except FileTooLarge:
        raise ToolFailure(f"{resource} is over {RESOURCE_READ_MAX // (1024 * 1024)} MB.") from None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ToolFailure(
            f"{resource} changed while it was being read (a symlink took the place of a "
            "folder or the file); it was not read."
        ) from None
    if is_binary(data):
        raise ToolFailure(f"{resource} is a binary file; only text files can be read.")
    half = RESOURCE_MAX // 2
    return middle_truncate(data.decode("utf-8", errors="replace"), half, RESOURCE_MAX - half)
