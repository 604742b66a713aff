"""`skills/list`: the skills as the next turn would read them, for people.

The skills are read again (the same stat-based check a turn's start makes), so the answer is
current; the catalog's cost is estimated as the context meter estimates (3.5 characters a
token), for the catalog as it stands with no file in play plus the `skill` tool's schema.
"""

import trio

from tether.daemon.context.budget import estimate_tokens, toolset_chars
from tether.daemon.skills.catalog import catalog
from tether.daemon.skills.library import SkillLibrary
from tether.daemon.tools.builtin import skill_tools
from tether.daemon.tools.registry import ToolRegistry
from tether.protocol.methods import InvalidSkill, SkillInfo, SkillsListResult


async def list_skills(library: SkillLibrary | None) -> SkillsListResult:
    """The skills, the invalid ones and why, and what the catalog costs (None: no skills)."""
    if library is None:
        return SkillsListResult()
    found = await trio.to_thread.run_sync(library.refresh)
    tokens = 0
    if found:
        schema = toolset_chars(ToolRegistry(skill_tools(library)).toolset)
        tokens = estimate_tokens(len(catalog(found.skills)) + schema)
    return SkillsListResult(
        skills=[
            SkillInfo(
                name=skill.name,
                description=skill.description,
                origin=skill.origin,
                source=skill.source,
                path=str(skill.file),
                trusted=library.is_trusted(skill),
                globs=list(skill.globs),
                warnings=list(skill.warnings),
            )
            for skill in found.skills
        ],
        invalid=[
            InvalidSkill(path=str(bad.file), origin=bad.origin, reason=bad.reason)
            for bad in found.invalid
        ],
        catalog_tokens=tokens,
        workspace_trusted=library.trust.trusted,
        sources=[str(source.folder) for source in library.sources],
    )
