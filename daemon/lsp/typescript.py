"""Which TypeScript installs can serve LSP themselves, and where a project's own TypeScript is.

TypeScript 7 is a native compiler that serves LSP itself (`tsc --lsp --stdio`; the preview
package `@typescript/native-preview` names it `tsgo`). It ships no `tsserver.js`, so
typescript-language-server cannot run on it. TypeScript 5 and 6 have the `tsserver.js` and a
`tsc` without `--lsp`.

An install is told by the npm package its program belongs to: `package.json` in the folder
above the program's own (`node_modules/typescript/bin/tsc`, and the native binary's
`@typescript/typescript-<platform>-<arch>/lib/tsc`), symlinks resolved (`.bin/tsc` and a
global `prefix/bin/tsc` link there). Everything here reads the disk (blocking).
"""

import json
from pathlib import Path
from typing import cast

NATIVE_MAJOR = 7
"""The first TypeScript whose `tsc` serves LSP."""

LSP_ARGUMENTS = ("--lsp", "--stdio")


def package_of(program: str | Path) -> tuple[str, str] | None:
    """(name, version) of the npm package `program` belongs to; None when it is not in one
    (or the manifest cannot be read)."""
    try:
        manifest = Path(program).resolve().parent.parent / "package.json"
        data: object = json.loads(manifest.read_bytes())
    except (OSError, RuntimeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    fields = cast("dict[str, object]", data)
    name, version = fields.get("name"), fields.get("version")
    if not isinstance(name, str) or not isinstance(version, str):
        return None
    return name, version


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def is_native(package: tuple[str, str] | None) -> bool:
    """Whether `package` (see `package_of`) is a TypeScript whose compiler serves LSP."""
    if package is None:
        return False
    name, version = package
    if name == "typescript":
        return _major(version) >= NATIVE_MAJOR
    # The preview and the per-platform packages holding the native binaries.
    return name.startswith(("@typescript/native-preview", "@typescript/typescript-"))


def serves_lsp(command: tuple[str, ...] | list[str], program: str) -> bool:
    """Whether `command`, run as the installed `program`, can serve LSP: a `tsc --lsp` only
    when that `tsc` is TypeScript 7 or later (an older one would just exit); any other
    command is taken at its word."""
    if Path(command[0]).name != "tsc" or "--lsp" not in command:
        return True
    return is_native(package_of(program))


def native_package_command(package: Path) -> list[str] | None:
    """The LSP command of the TypeScript package folder `package` (`.../node_modules/
    typescript` or `.../@typescript/native-preview`), when it is one that serves LSP."""
    for program in ("tsc", "tsgo"):
        binary = package / "bin" / program
        if binary.is_file() and is_native(package_of(binary)):
            return [str(binary), *LSP_ARGUMENTS]
    return None


def native_beside(program: str) -> list[str] | None:
    """The LSP command of the TypeScript that the typescript-language-server at `program`
    would resolve from its own install (its `node_modules`, then each folder above), when that
    TypeScript is native: it has no `tsserver.js`, so the server would fail on it."""
    try:
        folders = Path(program).resolve().parents
    except (OSError, RuntimeError):
        return None
    for folder in folders:
        package = folder / "node_modules" / "typescript"
        if (package / "package.json").is_file():
            return native_package_command(package)
    return None


def project_typescript(root: Path, workspace: Path) -> Path | None:
    """The TypeScript package a project at `root` resolves: the nearest
    `node_modules/typescript` from `root` up to `workspace`, else the preview
    (`node_modules/@typescript/native-preview`); None when the project has neither."""
    folder = root
    while True:
        for package in (
            folder / "node_modules" / "typescript",
            folder / "node_modules" / "@typescript" / "native-preview",
        ):
            if (package / "package.json").is_file():
                return package
        if folder == workspace or workspace not in folder.parents:
            return None
        folder = folder.parent
