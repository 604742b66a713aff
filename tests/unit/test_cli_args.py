"""Every `tether` subcommand names a command that loads, and parsing loads none of them."""

import argparse
import subprocess
import sys
from collections.abc import Iterator
from typing import cast

import pytest

from tether.clients.cli import commands
from tether.clients.cli.args import build_parser


def _leaves(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, str | None]]:
    """(subcommand path, handler name) for every parser without subcommands of its own."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            children = cast("dict[str, argparse.ArgumentParser]", action.choices)
            for name, child in children.items():
                yield from _leaves(child, f"{path} {name}".strip())
            return
    yield path, parser.get_default("handler")


def test_every_subcommand_names_a_command_that_loads() -> None:
    leaves = dict(_leaves(build_parser()))
    assert {"run", "approve", "deny", "daemon", "demo", "dev model-server"} <= leaves.keys()
    for path, handler in leaves.items():
        assert handler is not None, f"`tether {path}` names no command"
        assert callable(commands.load(handler)), path


def test_a_misnamed_command_fails_to_load() -> None:
    with pytest.raises(AttributeError):
        commands.load("turns.cmd_nonexistent")


def test_parsing_loads_no_command_module() -> None:
    code = (
        "import sys\n"
        "from tether.clients.cli.args import build_parser\n"
        "build_parser().parse_args(['run', 'hi'])\n"
        "print(','.join(sorted(m for m in sys.modules"
        " if m.startswith('tether.clients.cli.commands.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("given", ["-1", "soon", "nan", "inf"])
def test_an_approval_timeout_that_is_no_number_of_seconds_is_refused(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--approval-timeout", given, "go"])
    assert exited.value.code == 2
    assert f"{given!r} is not a number of seconds (0 or more)" in capsys.readouterr().err


def test_the_approval_timeout_defaults_to_deny_at_once() -> None:
    assert build_parser().parse_args(["run", "go"]).approval_timeout == 0.0
    assert (
        build_parser().parse_args(["run", "--approval-timeout", "2.5", "go"]).approval_timeout
        == 2.5
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["run", "--workspace", "/nonexistent/folder", "go"], 2),  # refused before the command
        (["run", "--workspace", "/"], 2),  # refused by the command: no prompt
        (["--version"], 0),  # argparse's own exit
    ],
)
def test_main_leaves_the_collector_on_with_its_start_frozen(argv: list[str], code: int) -> None:
    """`main` pauses the garbage collector while the command starts (its imports); however
    that ends, the command runs, and the process goes on, with it on again and what the start
    made frozen out of its passes."""
    program = (
        "import gc\n"
        "from tether.clients.cli.main import main\n"
        "try:\n"
        f"    code = main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(code, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.stdout.split()[-3:] == [str(code), "True", "True"], done.stderr


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return cast("dict[str, argparse.ArgumentParser]", action.choices)
    raise AssertionError("no subcommands")


_ARGVS = [
    ["run", "--json", "-s", "abc", "fix", "it"],
    ["-w", "/tmp", "run", "go"],
    ["--workspace=/tmp", "run", "-c", "go"],
    ["--workspace", "/tmp", "approve", "s1", "a1", "--always"],
    ["deny", "-m", "no"],
    ["sessions", "--delete", "x"],
    ["daemon", "status", "--json"],
    ["dev", "model-server", "--script", "s.json", "--port", "5"],
    ["chat", "--continue"],
]


@pytest.mark.parametrize("argv", _ARGVS, ids=[" ".join(a) for a in _ARGVS])
def test_the_parser_built_for_one_command_parses_it_as_the_whole_parser_does(
    argv: list[str],
) -> None:
    assert build_parser(argv).parse_args(argv) == build_parser().parse_args(argv)
    assert len(_subcommands(build_parser(argv))) <= 2  # approve and deny come together


@pytest.mark.parametrize("argv", [["--help"], ["bogus"], ["-w", "run"], []])
def test_without_a_known_command_every_subcommand_is_built(argv: list[str]) -> None:
    assert {"run", "models", "demo", "dev"} <= _subcommands(build_parser(argv)).keys()


@pytest.mark.parametrize("argv", [["--frobnicate"], ["-w", ".", "--frobnicate=1"]])
def test_an_unknown_option_before_any_command_is_named(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser(argv).parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized option '--frobnicate" in err
    assert "required" not in err


def test_an_unknown_command_is_refused_with_every_command_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser(["bogus"]).parse_args(["bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err
    for name in ("'run'", "'models'", "'demo'"):
        assert name in err


def _parsers(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, "argparse.ArgumentParser"]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            children = cast("dict[str, argparse.ArgumentParser]", action.choices)
            for name, child in children.items():
                yield f"{path} {name}".strip(), child
                yield from _parsers(child, f"{path} {name}".strip())


def test_every_subcommand_has_a_description_and_every_option_a_help() -> None:
    for path, parser in _parsers(build_parser()):
        assert parser.description, f"`tether {path} --help` has no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, (
                f"`tether {path}`: {action.option_strings or action.dest} has no help"
            )


def test_run_help_says_where_the_model_server_is_set() -> None:
    text = build_parser(["run"])._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    for setting in ("TETHER_BASE_URL", "TETHER_MODEL", "TETHER_API_KEY", "config.toml"):
        assert setting in text, setting
