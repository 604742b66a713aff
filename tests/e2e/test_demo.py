"""`tether demo` shows an edit with its diff, an approval answered from a second client, a
detach and a re-attach that catches up, and an undo, and leaves nothing behind."""

from pathlib import Path

from tests.support import Home, run_cli


def processes_mentioning(text: str) -> list[str]:
    """The command lines of running processes that contain `text`."""
    found: list[str] = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def test_demo_shows_what_tether_does_and_cleans_up(tmp_path: Path) -> None:
    home = Home(tmp_path / "user")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    home.env["TMPDIR"] = str(scratch)
    result = run_cli(home, "demo", timeout=60)
    assert result.returncode == 0, result.stderr
    out, err = result.stdout, result.stderr
    assert "SCRIPTED model" in err
    # The edit asks first, showing its diff; a second client answers.
    assert "approval needed" in err
    assert '-    return f"Hello, {name}!"\n+    return f"Hello, {name}! Welcome to tether."' in err
    assert "allowed by a second terminal" in err
    assert "edit_file(path='greeter/core.py'" in err
    assert "1 file changed (+1 -1)" in err
    # Detached, the turn ran on; re-attaching replayed what was missed.
    assert "re-attached from event" in err
    assert "(replay)" in err
    assert "read_file(path='README.md')" in err
    assert "greets people by name" in out
    # Undo put the file back.
    assert "restored greeter/core.py" in err
    assert 'reads again: return f"Hello, {name}!"' in err
    # Nothing is left: no scratch folder, no daemon or model server, nothing in the user's
    # own folders (the demo ran in a home of its own).
    assert list(scratch.iterdir()) == []
    assert processes_mentioning(str(scratch)) == []
    assert not (home.runtime / "tether").exists()
    for folder in ("data", "state", "config", "cache"):
        assert not (home.root / folder / "tether").exists(), folder
