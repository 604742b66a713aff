"""rename_symbol: a rename across files, computed by the file's language server
(`textDocument/rename`) and applied as one edit.

It is an edit like edit_file: the permission gate shows the whole multi-file diff before it
runs (in `ask` mode it asks), every file is written atomically through the turn's change
tracker (so `undo` restores them all with the turn), and every changed file gets
diagnostics afterwards.

What it refuses, before writing anything: a rename that creates, renames or deletes files;
edits to files outside the workspace, to credential-like files or in skill folders (whose
writes must each be asked about), or in dependency folders (`.venv`, `node_modules`, …); and
edits that do not replace the symbol's old name where the server says it is (the server's
copy of a file is out of date: try again).
"""

from pathlib import Path
from typing import Annotated, ClassVar

import msgspec
import trio

from tether.daemon.beneath import read_beneath
from tether.daemon.lsp.navigation import (
    RenameRefused,
    TextEdit,
    apply_edits,
    lease_encoding,
    rename,
    replaced_texts,
)
from tether.daemon.skills.library import WORKSPACE_FOLDERS
from tether.daemon.tools.base import ToolContext, ToolFailure, ToolKind, ToolOutput, ToolParams
from tether.daemon.tools.code_intel import SymbolAtParams, leased, still_indexing
from tether.daemon.tools.credentials import is_credential_path
from tether.daemon.tools.edits import decode, encode, plural, unified_diff, write_guarded
from tether.daemon.tools.filetree import DEPENDENCY_DIRS
from tether.daemon.workspace import display_path

MAX_FILE_BYTES = 10 * 1024 * 1024


class RenameSymbolParams(SymbolAtParams, frozen=True, kw_only=True):
    new_name: Annotated[str, msgspec.Meta(min_length=1, description="The symbol's new name.")]


class _FilePlan(msgspec.Struct, frozen=True, kw_only=True):
    path: Path
    shown: str
    before: bytes
    after: bytes
    places: int


class RenameSymbol:
    name: ClassVar[str] = "rename_symbol"
    description: ClassVar[str] = (
        "Rename a symbol everywhere it is used, as the file's language server computes it "
        "(it follows imports, so a same-named symbol elsewhere is left alone, unlike a text "
        "replace). Give the file, the line where the symbol appears, its name and the new "
        "name. Applied as one edit across all the files (one diff, undone together). Refused "
        "when the rename would create, move or delete files, or touch files outside the "
        "workspace, credential files or skill folders."
    )
    kind: ClassVar[ToolKind] = "edit"
    params: ClassVar[type[ToolParams]] = RenameSymbolParams

    def target_path(self, params: RenameSymbolParams) -> str:
        return params.path

    async def edited_paths(self, params: RenameSymbolParams, ctx: ToolContext) -> list[str]:
        return [plan.shown for plan in await self._plan(params, ctx)]

    async def preview(self, params: RenameSymbolParams, ctx: ToolContext) -> str:
        plans = await self._plan(params, ctx)
        return "".join(unified_diff(p.shown, p.before, p.after) for p in plans)

    async def run(self, params: RenameSymbolParams, ctx: ToolContext) -> ToolOutput:
        # Planned again: files may have changed while the user looked at the preview.
        plans = await self._plan(params, ctx)
        diffs = [
            await write_guarded(ctx, plan.path, plan.shown, plan.before, plan.after)
            for plan in plans
        ]
        places = sum(plan.places for plan in plans)
        files = ", ".join(plan.shown for plan in plans)
        return ToolOutput(
            text=f"Renamed {params.symbol or 'the symbol'} to {params.new_name} in "
            f"{plural(len(plans), 'file')} ({files}): {plural(places, 'place')}.",
            diff="".join(diffs),
            edited=[plan.path for plan in plans],
        )

    async def _plan(self, params: RenameSymbolParams, ctx: ToolContext) -> list[_FilePlan]:
        async with leased(ctx, params.path, "renameProvider") as lease:
            position = params.position_in(lease)
            old = params.symbol or _word_at(lease.text, params.line, params.column)
            try:
                edits = await rename(lease, position, params.new_name)
            except RenameRefused as exc:
                raise ToolFailure(f"Not renamed: {exc}.") from None
            if not edits and lease.just_started:
                raise still_indexing(lease)
            encoding = lease_encoding(lease)
        if not edits:
            raise ToolFailure(
                f"{lease.server} found nothing to rename at {params.path}:{params.line}."
            )
        root = ctx.workspace.resolve()
        return await trio.to_thread.run_sync(_plan_files, root, edits, old, encoding)


def _word_at(text: str, line: int, column: int) -> str:
    """The name starting at 1-based `column` of `line` (the old name when only a column was
    given)."""
    content = text.splitlines()[line - 1]
    end = start = column - 1
    while end < len(content) and (content[end].isalnum() or content[end] == "_"):
        end += 1
    return content[start:end]


def _plan_files(
    root: Path, edits: dict[Path, list[TextEdit]], old: str, encoding: str
) -> list[_FilePlan]:
    """Each file's content before and after, checked (see the module docstring). Blocking."""
    plans: list[_FilePlan] = []
    for path, file_edits in sorted(edits.items()):
        shown = display_path(root, path)
        if path != root and root not in path.parents:
            raise ToolFailure(
                f"Not renamed: the rename would change {path}, outside the workspace."
            )
        if is_credential_path(shown) or any(
            shown == folder or shown.startswith(folder + "/") for folder in WORKSPACE_FOLDERS
        ):
            raise ToolFailure(
                f"Not renamed: the rename would change {shown}, which is edited only with "
                "edit_file (a credential file or a skill folder)."
            )
        if DEPENDENCY_DIRS.intersection(Path(shown).parts[:-1]):
            raise ToolFailure(
                f"Not renamed: the rename would change {shown}, an installed dependency "
                "(rename only what the project itself declares)."
            )
        try:
            before, _ = read_beneath(root, path, limit=MAX_FILE_BYTES)
        except OSError as exc:
            raise ToolFailure(f"Not renamed: {shown} could not be read ({exc}).") from None
        text = decode(before)
        try:
            replaced = replaced_texts(text, file_edits, encoding)
            after = encode(apply_edits(text, file_edits, encoding))
        except ValueError:
            replaced = [""]
            after = before
        if any(part != old for part in replaced):
            raise ToolFailure(
                f"Not renamed: the language server's copy of {shown} is out of date (its edits "
                f"do not replace {old!r} there); try again."
            )
        if after != before:
            plans.append(
                _FilePlan(
                    path=path, shown=shown, before=before, after=after, places=len(file_edits)
                )
            )
    return plans
