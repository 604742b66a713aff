"""`load_config` over real files in a temporary folder: the provider kind, then its API key,
from the file and the environment; overrides and the errors bad values get."""

from pathlib import Path

import pytest

from tether.daemon.config.settings import ConfigError, load_config, load_workspace_rules
from tether.daemon.lsp.servers import BUILTIN_SERVERS, merge_specs

OPENAI_FILE = '[provider]\nkind = "openai"\napi_key = "file-openai"\n'
ANTHROPIC_FILE = '[provider]\nkind = "anthropic"\napi_key = "file-anthropic"\n'
ANTHROPIC_FILE_NO_KEY = '[provider]\nkind = "anthropic"\n'
KEYLESS_FILE = '[provider]\nmodel = "m"\n'
DEFAULT_KIND_WITH_KEY = '[provider]\napi_key = "file-default"\n'

BOTH_VENDOR_KEYS = {"OPENAI_API_KEY": "env-openai", "ANTHROPIC_API_KEY": "env-anthropic"}


@pytest.mark.parametrize(
    ("file", "env", "kind", "key"),
    [
        # No file: the default kind, and that kind's own variable.
        (None, {}, "openai", ""),
        (None, {"OPENAI_API_KEY": "env-openai"}, "openai", "env-openai"),
        (None, {"ANTHROPIC_API_KEY": "env-anthropic"}, "openai", ""),
        (None, BOTH_VENDOR_KEYS, "openai", "env-openai"),
        # The kind from the environment picks that kind's variable.
        (None, {"TETHER_PROVIDER": "anthropic", **BOTH_VENDOR_KEYS}, "anthropic", "env-anthropic"),
        (
            None,
            {"TETHER_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "env-anthropic"},
            "anthropic",
            "env-anthropic",
        ),
        (None, {"TETHER_PROVIDER": "anthropic", "OPENAI_API_KEY": "env-openai"}, "anthropic", ""),
        # The kind from the file picks that kind's variable.
        (ANTHROPIC_FILE_NO_KEY, BOTH_VENDOR_KEYS, "anthropic", "env-anthropic"),
        (ANTHROPIC_FILE_NO_KEY, {"OPENAI_API_KEY": "env-openai"}, "anthropic", ""),
        (KEYLESS_FILE, BOTH_VENDOR_KEYS, "openai", "env-openai"),
        # The environment's kind wins over the file's.
        (
            ANTHROPIC_FILE_NO_KEY,
            {"TETHER_PROVIDER": "openai", **BOTH_VENDOR_KEYS},
            "openai",
            "env-openai",
        ),
        # The file's key beats the vendor's variable, for the file's own kind.
        (ANTHROPIC_FILE, BOTH_VENDOR_KEYS, "anthropic", "file-anthropic"),
        (OPENAI_FILE, BOTH_VENDOR_KEYS, "openai", "file-openai"),
        (DEFAULT_KIND_WITH_KEY, {"OPENAI_API_KEY": "env-openai"}, "openai", "file-default"),
        # ... but not when the environment switched to another kind: it was written for that one.
        (ANTHROPIC_FILE, {"TETHER_PROVIDER": "openai", **BOTH_VENDOR_KEYS}, "openai", "env-openai"),
        (ANTHROPIC_FILE, {"TETHER_PROVIDER": "openai"}, "openai", ""),
        (
            OPENAI_FILE,
            {"TETHER_PROVIDER": "anthropic", **BOTH_VENDOR_KEYS},
            "anthropic",
            "env-anthropic",
        ),
        (DEFAULT_KIND_WITH_KEY, {"TETHER_PROVIDER": "anthropic"}, "anthropic", ""),
        (ANTHROPIC_FILE, {"TETHER_PROVIDER": "anthropic"}, "anthropic", "file-anthropic"),
        # TETHER_API_KEY wins over everything, for either kind.
        (None, {"TETHER_API_KEY": "tether", **BOTH_VENDOR_KEYS}, "openai", "tether"),
        (ANTHROPIC_FILE, {"TETHER_API_KEY": "tether", **BOTH_VENDOR_KEYS}, "anthropic", "tether"),
        (None, {"TETHER_PROVIDER": "anthropic", "TETHER_API_KEY": "tether"}, "anthropic", "tether"),
        # Empty variables count as unset.
        (
            ANTHROPIC_FILE,
            {"TETHER_API_KEY": "", "TETHER_PROVIDER": ""},
            "anthropic",
            "file-anthropic",
        ),
        (None, {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "x"}, "openai", ""),
    ],
)
def test_the_kind_is_settled_first_then_its_key(
    tmp_path: Path, file: str | None, env: dict[str, str], kind: str, key: str
) -> None:
    path = tmp_path / "config.toml"
    if file is not None:
        path.write_text(file)
    provider = load_config(env=env, path=path).provider
    assert (provider.kind, provider.api_key) == (kind, key)


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[provider]\nbase_url = "http://file/v1"\nmodel = "file-model"\n'
        '[permissions]\nmode = "ask"\n'
    )
    config = load_config(env={}, path=path)
    assert (config.provider.base_url, config.provider.model) == ("http://file/v1", "file-model")
    assert config.permissions.mode == "ask"
    env = {
        "TETHER_BASE_URL": "http://env/v1",
        "TETHER_MODEL": "env-model",
        "TETHER_PERMISSION_MODE": "auto",
    }
    config = load_config(env=env, path=path)
    assert (config.provider.base_url, config.provider.model) == ("http://env/v1", "env-model")
    assert config.permissions.mode == "auto"


def test_tether_lsp_off_turns_off_every_language_server(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[[lsp]]\nname = "zls"\ncommand = ["zls"]\nextensions = [".zig"]\n')
    assert [s.name for s in merge_specs(load_config(env={}, path=path).lsp)] == [
        *(s.name for s in BUILTIN_SERVERS),
        "zls",
    ]
    config = load_config(env={"TETHER_LSP": "off"}, path=path)
    assert merge_specs(config.lsp) == []


@pytest.mark.parametrize(
    ("file", "env", "fragment"),
    [
        (None, {"TETHER_PROVIDER": "gemini"}, "TETHER_PROVIDER must be openai or anthropic"),
        (None, {"TETHER_LSP": "on"}, "TETHER_LSP may only be off"),
        (None, {"TETHER_PERMISSION_MODE": "yolo"}, "TETHER_PERMISSION_MODE must be"),
        ('[provider]\nkind = "gemini"\n', {}, "config.toml"),
        ("[provider\n", {}, "config.toml"),
        ("[provider]\nkey = 1\n", {}, "unknown setting"),
    ],
)
def test_bad_values_are_config_errors_naming_the_problem(
    tmp_path: Path, file: str | None, env: dict[str, str], fragment: str
) -> None:
    path = tmp_path / "config.toml"
    if file is not None:
        path.write_text(file)
    with pytest.raises(ConfigError, match=fragment):
        load_config(env=env, path=path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # An unknown setting: its line, its full name and what its table takes.
        (
            '# mine\nmax_steps = 10\n\n[provider]\nmodel = "m"\nmodle = "x"\n',
            ", line 6: provider.modle: unknown setting; provider takes kind, base_url, model,",
        ),
        # A value of the wrong type, set with a dotted key at the top level.
        ("provider.model = 3\n", ", line 1: provider.model: Expected `str`, got `int`"),
        ('[provider]\nkind = "gemini"\n', ", line 2: provider.kind: Invalid enum value 'gemini'"),
        # The second of two [[lsp]] tables.
        (
            '[[lsp]]\nname = "a"\n[[lsp]]\nname = "b"\ncommand = "b-server"\n',
            ", line 5: lsp[1].command: Expected `array`, got `str`",
        ),
        ("colour = 1\n", ", line 1: colour: unknown setting; the top level takes provider,"),
        # A TOML syntax error keeps tomllib's own line and column.
        ('[provider]\nmodel = "unclosed\n', ", line 2, column 18: Illegal character"),
    ],
)
def test_a_bad_file_is_reported_with_its_line_and_setting(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(env={}, path=path)
    assert str(caught.value).startswith(f"{path}{expected}"), str(caught.value)


def test_the_shell_is_bash_unless_the_users_own_config_names_theirs(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert load_config(env={}, path=path).shell == "bash"
    path.write_text('shell = "user"\n')
    assert load_config(env={}, path=path).shell == "user"
    path.write_text('shell = "zsh"\n')
    with pytest.raises(ConfigError, match="shell: Invalid enum value 'zsh'"):
        load_config(env={}, path=path)
    workspace = tmp_path / "project"
    (workspace / ".tether").mkdir(parents=True)
    (workspace / ".tether" / "config.toml").write_text('shell = "user"\n')
    assert load_workspace_rules(workspace).ignored == ["shell"]
