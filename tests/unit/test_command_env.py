"""Which variables a command gets: secret names and URLs carrying a password are kept from it,
ordinary variables (and names that merely contain a secret-looking word) reach it."""

import subprocess

import pytest

from tether.daemon.procs.env import command_env, is_secret_variable

KEPT_FROM_COMMANDS = {
    "DATABASE_URL": "postgres://app:s3cr3t-pw@db.internal:5432/app",
    "REDIS_URL": "redis://:hunter2@cache:6379/0",
    "HTTPS_PROXY": "http://me:proxy-pw@proxy.corp:3128",
    "MONGO": "mongodb+srv://admin:pw@cluster0.example.net/db?retryWrites=true",
    "SENTRY_DSN": "https://0123456789abcdef@o1.ingest.sentry.io/42",
    "DB_DSN": "user:password@tcp(localhost:3306)/dbname",
    "DSN": "host=db user=app password=pw",
    "NPM_CONFIG__AUTH": "dXNlcjpwYXNz",
    "npm_config__auth": "dXNlcjpwYXNz",
    "BASIC_AUTH": "user:pass",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/key.json",
    "AWS_SHARED_CREDENTIALS": "aws-shared-9f1",
    "API_TOKEN": "tok-77c2e1",
}

PASSED_TO_COMMANDS = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/me",
    "AUTHOR": "Ada",
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "OAUTH_CALLBACK_PORT": "8976",
    "AUTH_MODE": "none",
    "KEYBOARD": "us",
    "DATABASE_URL_SQLITE": "sqlite:///var/db/app.sqlite3",
    "UPSTREAM": "https://user@example.com/repo.git",
    "REMOTE": "git@github.com:org/repo.git",
    "HTTP_PROXY": "http://proxy.corp:3128",
    "DOCS": "https://example.com/a:b@c",
    "PS1": r"${debian_chroot:+($debian_chroot)}\u@\h:\w\$ ",
    "LS_COLORS": "rs=0:di=01;34:ln=01;36:*.tar=01;31",
}


@pytest.mark.parametrize(("name", "value"), KEPT_FROM_COMMANDS.items())
def test_secret_variables(name: str, value: str) -> None:
    assert is_secret_variable(name, value)


@pytest.mark.parametrize(("name", "value"), PASSED_TO_COMMANDS.items())
def test_ordinary_variables(name: str, value: str) -> None:
    assert not is_secret_variable(name, value)


def test_a_command_sees_only_the_ordinary_variables() -> None:
    env = command_env({**KEPT_FROM_COMMANDS, **PASSED_TO_COMMANDS})
    seen = subprocess.run(
        ["/usr/bin/env", "-0"], env=env, capture_output=True, check=True, timeout=30
    ).stdout.decode()
    names = {entry.partition("=")[0] for entry in seen.split("\0") if entry}
    assert names.isdisjoint(KEPT_FROM_COMMANDS)
    assert set(PASSED_TO_COMMANDS) <= names
    for value in KEPT_FROM_COMMANDS.values():
        assert value not in seen
