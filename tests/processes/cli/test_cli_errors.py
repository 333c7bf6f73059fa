"""Bad input: each error the CLI can meet has a clear message and a documented exit code
(docs/operations.md, section "CLI")."""

from __future__ import annotations

import pytest

from tests.processes.cli.apps.names import ECHO
from tests.processes.cli.conftest import Cli, unreachable_backend

EXIT_USAGE = 2
EXIT_APP_NOT_IMPORTABLE = 3
EXIT_BACKEND = 4
EXIT_NOT_FOUND = 5


def _fails(cli: Cli, code: int, *args: str, env: dict[str, str] | None = None) -> str:
    done = cli(*args, env=env)
    assert done.code == code, f"{args} exited {done.code}, not {code}:\n{done.stderr}"
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    return done.stderr


def test_an_app_that_cannot_be_imported(cli: Cli) -> None:
    message = _fails(cli, EXIT_APP_NOT_IMPORTABLE, "runs", "list", "--app", "no_such_mod:app")
    assert "cannot import 'no_such_mod'" in message
    message = _fails(cli, EXIT_APP_NOT_IMPORTABLE, "worker", env={"RUNLANE_APP": ""})
    assert "--app" in message and "RUNLANE_APP" in message
    operator = cli.without("RUNLANE_APP")  # reads build the app from the environment
    bad = {"RUNLANE_ENVIRONMENT": "Not Valid"}
    message = _fails(operator, EXIT_APP_NOT_IMPORTABLE, "runs", "list", env=bad)
    assert "cannot build an app from the environment" in message


def test_an_unreachable_backend_names_the_endpoint(cli: Cli) -> None:
    endpoint, unreachable = unreachable_backend()
    message = _fails(cli, EXIT_BACKEND, "runs", "get", "x" * 32, env=unreachable)
    assert f"cannot reach DynamoDB at {endpoint}" in message


def test_a_missing_table_says_how_to_provision(cli: Cli) -> None:
    message = _fails(cli, EXIT_BACKEND, "runs", "list")
    assert "does not exist" in message
    assert "runlane-sqs provision" in message


def test_a_missing_run_and_bad_payload_text(cli: Cli, provisioned: dict[str, str]) -> None:
    message = _fails(cli, EXIT_NOT_FOUND, "runs", "events", "f" * 32)
    assert f"run '{'f' * 32}' not found" in message
    message = _fails(cli, EXIT_USAGE, "trigger", ECHO, "--payload", "{'single': 'quotes'}")
    assert "--payload" in message and "not valid JSON" in message
    message = _fails(cli, EXIT_NOT_FOUND, "trigger", "shop.nothing")
    assert "unknown task 'shop.nothing'" in message


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ('"\\ud800"', "lone surrogate (U+D800)"),
        ("[" * 1000 + "]" * 1000, "nested deeper than 64 levels"),
        ("NaN", "not valid JSON"),
    ],
    ids=["lone-surrogate", "1000-deep", "nan"],
)
def test_a_payload_text_cannot_store_is_a_usage_error_without_a_traceback(
    cli: Cli, provisioned: dict[str, str], payload: str, says: str
) -> None:
    message = _fails(cli, EXIT_USAGE, "trigger", ECHO, "--payload", payload)
    assert "--payload" in message and says in message
    assert cli("runs", "list", "--json").json()["runs"] == []  # nothing was stored
