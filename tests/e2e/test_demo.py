"""`tether demo` runs a real turn with the scripted model, and cleans up after itself."""

from pathlib import Path

from tests.support import Home, run_cli


def test_demo_runs_end_to_end_and_says_the_model_is_scripted(tmp_path: Path) -> None:
    home = Home(tmp_path / "user")
    result = run_cli(home, "demo", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "SCRIPTED model" in result.stderr
    assert "✓ read_file(path='greeter/core.py')" in result.stderr
    assert "returns `Hello, {name}!`" in result.stdout
    # The demo's daemon stopped and removed its discovery file.
    leftovers = list((home.runtime / "tether").glob("daemon-*.json"))
    assert leftovers == []
