"""An operator's shell has the backend's variables but not the producing app: reads,
operator actions, tokens, signals and provisioning work without ``--app`` or
``RUNLANE_APP``; the commands that run or check task code say they need it."""

from __future__ import annotations

import pytest

from runlane_sqs import Runlane
from tests.processes.cli.apps.names import CHARGE, ECHO, FAIL_ENV
from tests.processes.cli.conftest import Cli

EXIT_APP_NOT_IMPORTABLE = 3
EXIT_ILLEGAL = 6
NO_APP = "RUNLANE_APP"


def test_an_operator_without_the_app_lists_reads_and_retries_a_failed_run(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    source = str(cli("trigger", CHARGE, "--payload", '{"amount": 5}', "--json").json()["id"])
    cli.ok("worker", "--drain", env={FAIL_ENV: "1"})
    operator = cli.without(NO_APP)

    listed = operator("runs", "list", "--json").json()
    assert [(r["id"], r["status"]) for r in listed["runs"]] == [(source, "failed")]
    shown = operator.ok("runs", "get", source)
    assert source in shown.stdout and "card declined" in shown.stdout
    retried = operator("runs", "retry", source, "--reason", "card fixed", "--json").json()
    assert (retried["task"], retried["source_run_id"], retried["status"]) == (
        CHARGE,
        source,
        "queued",
    )

    assert cli.ok("worker", "--drain").stdout.strip() == "executed 1 run(s)"  # with the app
    done = operator("runs", "get", retried["id"], "--json").json()
    assert (done["status"], done["result"]) == ("succeeded", {"charged": 5})


def test_tokens_signals_and_provision_need_no_app(cli: Cli) -> None:
    operator = cli.without(NO_APP)
    assert (
        operator.ok("provision").stdout.strip()
        == f"table {cli.env['RUNLANE_TABLE']} and queues ready"
    )

    token = operator.ok("tokens", "create").stdout.strip()
    completed = operator.ok("tokens", "complete", token, "--value", '"yes"')
    assert completed.stdout.strip() == f"token {token} is completed"
    assert operator("tokens", "get", token, "--json").json()["value"] == "yes"
    assert operator.ok("signals", "send", "order-7").stdout.strip() == "woke 0 run(s)"
    assert operator("runs", "list", "--json").json() == {"runs": [], "cursor": None}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("worker", "--drain"), "the worker runs your tasks"),
        (("trigger", CHARGE), "the app that registers the task"),
        (("maintenance", "run", "--once"), "retry policy"),
    ],
    ids=["worker", "trigger", "maintenance"],
)
def test_commands_that_run_task_code_say_they_need_the_app(
    cli: Cli, provisioned: dict[str, str], args: tuple[str, ...], why: str
) -> None:
    done = cli.without(NO_APP)(*args)

    assert done.code == EXIT_APP_NOT_IMPORTABLE, f"{args} exited {done.code}:\n{done.stderr}"
    assert "Traceback" not in done.stderr
    error, hint = done.stderr.splitlines()
    assert error.startswith("error: no app named;") and why in error
    assert hint == "hint: name the app with --app module:attribute or RUNLANE_APP"
    assert done.stdout == ""


def test_an_operator_without_the_app_finds_and_unparks_a_parked_run(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    """A worker of an older deployment (no ``shop.echo``) parks the run; the operator
    lists parked runs and unparks it; the shop's worker then runs it."""
    run_id = str(cli("trigger", ECHO, "--payload", '"hi"', "--json").json()["id"])
    older = Runlane.from_env(park_after_receives=1)
    assert older.worker().drain() == 0
    operator = cli.without(NO_APP)

    listed = operator("runs", "list", "--status", "parked", "--json").json()
    assert [r["id"] for r in listed["runs"]] == [run_id]
    unparked = operator.ok("runs", "unpark", run_id, "--reason", "deployed v2")
    again = operator("runs", "unpark", run_id)

    assert unparked.stdout.strip() == f"run {run_id} is queued"
    assert again.code == EXIT_ILLEGAL and "not parked" in again.stderr
    assert cli.ok("worker", "--drain").stdout.strip() == "executed 1 run(s)"
    assert operator("runs", "get", run_id, "--json").json()["status"] == "succeeded"
