"""`tether.protocol.msgspec_import`: msgspec without typing_extensions (and the inspect, ast and
dis it brings), in a fresh interpreter each, since this one has imported both long ago."""

import subprocess
import sys
from pathlib import Path


def _run(code: str, *path: Path) -> str:
    env_path = ":".join([*map(str, path), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


HIDE = "from tether.protocol.msgspec_import import hide_typing_extensions_from_msgspec as hide\n"


def test_msgspec_comes_without_typing_extensions_which_stays_importable() -> None:
    out = _run(
        "import sys\n" + HIDE + "hide()\n"
        "assert 'msgspec' not in sys.modules  # it stays where the first user imports it\n"
        "from tether.protocol.jsonrpc import decode_envelope\n"
        'frame = decode_envelope(b\'{"jsonrpc":"2.0","id":7,"method":"sessions/list"}\')\n'
        "assert frame.id == 7 and frame.method == 'sessions/list', frame\n"
        "loaded = sorted(m for m in ('typing_extensions', 'inspect', 'ast', 'dis')"
        " if m in sys.modules)\n"
        "left = [f for f in sys.meta_path if 'Msgspec' in getattr(f, '__name__', '')]\n"
        "import typing_extensions\n"
        "print(loaded, left, typing_extensions.ReadOnly is not None)\n"
    )
    assert out == "[] [] True"


def test_typing_extensions_imported_first_is_left_to_msgspec() -> None:
    for before, between in [("import typing_extensions\n", ""), ("", "import typing_extensions\n")]:
        out = _run(
            before + HIDE + "hide()\n" + between + "import msgspec._utils as u\n"
            "print(u._get_type_hints.__module__)\n"
        )
        assert out == "typing_extensions", (before, between)


def test_a_msgspec_that_needs_typing_extensions_is_imported_afresh_with_it(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "msgspec"
    fake.mkdir()
    # The package's first submodule loads before the import that fails; the second attempt
    # must load it again, not reuse what the failed one left.
    (fake / "__init__.py").write_text(
        "from msgspec import part\nfrom typing_extensions import ReadOnly\nMARK = 'fake'\n"
    )
    (fake / "part.py").write_text(
        "import builtins\nbuiltins.PART_RUNS = getattr(builtins, 'PART_RUNS', 0) + 1\n"
    )
    out = _run(
        "import sys\n" + HIDE + "hide()\n"
        "import msgspec\n"
        "print(msgspec.MARK, PART_RUNS, msgspec.part is sys.modules['msgspec.part'],"
        " 'typing_extensions' in sys.modules)\n",
        tmp_path,
    )
    assert out == "fake 2 True True"
