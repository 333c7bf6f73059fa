"""``runlane-sqs runs wait``: a caller's shell waits for a run to finish, and the exit
code says how it ended (0 succeeded, 7 failed or cancelled, 8 still unfinished at the
timeout)."""

from __future__ import annotations

import json

from tests.processes.cli.apps.names import CHARGE, ECHO, FAIL_ENV
from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, Cli, wait_until

EXIT_RUN_UNSUCCESSFUL = 7
EXIT_WAIT_TIMED_OUT = 8


def _trigger(cli: Cli, *args: str) -> str:
    return str(cli("trigger", *args, "--json").json()["id"])


def test_wait_returns_when_a_worker_finishes_the_run(cli: Cli, provisioned: dict[str, str]) -> None:
    run_id = _trigger(cli, ECHO, "--payload", '{"n": 1}')
    waiting = cli.start("--log-format", "text", "runs", "wait", run_id, "--json")
    wait_until(
        lambda: "waiting for it to finish" in waiting.stderr() or not waiting.alive(),
        CLI_TIMEOUT_SECONDS,
        "runs wait to read the queued run",
    )
    assert waiting.alive(), waiting.stderr()  # it waits for the run, queued until now

    cli.ok("worker", "--drain")

    assert waiting.process.wait(timeout=CLI_TIMEOUT_SECONDS) == 0, waiting.stderr()
    run = json.loads(waiting.stdout())
    assert (run["id"], run["status"], run["result"]) == (run_id, "succeeded", {"echo": {"n": 1}})
    assert f"run {run_id}: queued; waiting for it to finish" in waiting.stderr()


def test_a_failed_run_ends_the_wait_with_its_own_exit_code_and_shows_the_failure(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, CHARGE, "--payload", '{"amount": 3}')
    cli.ok("worker", "--drain", env={FAIL_ENV: "1"})

    done = cli("runs", "wait", run_id)

    assert done.code == EXIT_RUN_UNSUCCESSFUL, done.stderr
    assert f"error: run {run_id} finished failed" in done.stderr.splitlines()
    assert "RuntimeError: card declined" in done.stdout  # shown like runs get


def test_a_run_nobody_works_on_times_out_showing_its_last_state(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, ECHO)

    done = cli("runs", "wait", run_id, "--timeout", "0.3", "--json")

    assert done.code == EXIT_WAIT_TIMED_OUT, done.stderr
    assert f"error: run {run_id} is still queued after 0.3 s" in done.stderr.splitlines()
    last = json.loads(done.stdout)
    assert (last["id"], last["status"]) == (run_id, "queued")
