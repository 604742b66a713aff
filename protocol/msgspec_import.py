"""msgspec imported without typing_extensions, for the processes that start often.

msgspec reads type hints with typing_extensions' `get_type_hints` when that package is
installed (httpx's anyio installs it) and with typing's otherwise. With `include_extras`, which
msgspec always passes, the two differ only in `ReadOnly` (PEP 705), which tether's types do not
use. But typing_extensions imports inspect, and with it ast, dis and tokenize: about a sixth of
what a `tether` command imports (bench/startup.py).

`hide_typing_extensions_from_msgspec` arranges that msgspec's first import, whenever and by
whichever module it happens, runs with typing_extensions hidden, so that a command keeps
importing msgspec as late as it does (`tether run` sends its turn before:
tether.clients.core.prelude).
Whoever imports typing_extensions afterwards gets it as usual; a process that already has it
keeps msgspec as msgspec would be without this module.
"""

import sys

TYPE_CHECKING = False  # typing stays out of a command's start (tests/unit/test_layout.py)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

HIDDEN = "typing_extensions"


class _HidingLoader:
    """msgspec's own loader, with typing_extensions hidden while the package runs."""

    def __init__(self, loader: "Any") -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: "ModuleType") -> None:
        if HIDDEN in sys.modules:
            self._loader.exec_module(module)
            return
        # A None entry makes `import typing_extensions` raise ImportError, which msgspec
        # handles by taking typing's forms.
        sys.modules[HIDDEN] = None  # pyright: ignore[reportArgumentType]
        try:
            self._loader.exec_module(module)
            return
        except ImportError:
            # A msgspec that cannot do without it: forget what this attempt loaded (its
            # submodules, the names it bound) and run the package again, as usual.
            for name in [m for m in sys.modules if m.startswith("msgspec.")]:
                del sys.modules[name]
            namespace = vars(module)
            made = [name for name in namespace if not name.startswith("__")]
            for name in made:
                del namespace[name]
        finally:
            del sys.modules[HIDDEN]
        self._loader.exec_module(module)


class _FirstImportOfMsgspec:
    """A meta path finder that takes part in one import, msgspec's first, and then leaves."""

    @classmethod
    def find_spec(
        cls, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if name != "msgspec":
            return None
        sys.meta_path.remove(cls)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = None if find is None else find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _HidingLoader(spec.loader)  # pyright: ignore[reportAttributeAccessIssue]
                return spec
        return None


def hide_typing_extensions_from_msgspec() -> None:
    """Have msgspec's first import in this process run without typing_extensions (unless
    either is already imported)."""
    if "msgspec" in sys.modules or HIDDEN in sys.modules:
        return
    if _FirstImportOfMsgspec not in sys.meta_path:
        sys.meta_path.insert(0, _FirstImportOfMsgspec)  # pyright: ignore[reportArgumentType]
