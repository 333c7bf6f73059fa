"""Operating real CLI processes under faults: ``maintenance run --every`` carries on after
a transient failure but exits 4 on a permanent one, as ``--once`` does; a worker's lease
owner names the process (``--worker-id``, ``RUNLANE_WORKER_ID``, or host and pid), and
``--lease-seconds`` sets its lease."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.processes.cli.apps.names import PATIENT
from tests.processes.cli.conftest import (
    CLI_TIMEOUT_SECONDS,
    Cli,
    Done,
    Started,
    unreachable_backend,
    wait_until,
)

EXIT_BACKEND = 4
PROMPTLY_SECONDS = 20
"""A permanent error ends the loop at its first pass: well before a second would start."""


def error_line(done: Done) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    return line


def test_every_exits_4_promptly_when_the_table_does_not_exist(cli: Cli) -> None:
    started = time.monotonic()
    done = cli("maintenance", "run", "--every", "1")

    assert done.code == EXIT_BACKEND, done.stderr
    assert time.monotonic() - started < PROMPTLY_SECONDS
    assert "does not exist" in error_line(done)
    assert "pass failed" not in done.stderr
    assert done.stdout == ""


def test_every_exits_4_when_dynamodb_refuses_the_requests_as_invalid(
    cli: Cli, backend_env: dict[str, str]
) -> None:
    """The table named is another application's, with another key schema: DynamoDB
    refuses every request with a ValidationException, which no later pass escapes."""
    boto3.client("dynamodb").create_table(
        TableName=backend_env["RUNLANE_TABLE"],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    done = cli("maintenance", "run", "--every", "1")

    assert done.code == EXIT_BACKEND, done.stderr
    assert "ValidationException" in error_line(done)
    assert "pass failed" not in done.stderr


def test_every_carries_on_while_dynamodb_cannot_be_reached(cli: Cli) -> None:
    _, unreachable = unreachable_backend()
    loop = cli.start("maintenance", "run", "--every", "1", env=unreachable)

    def failed_once() -> bool:
        assert loop.alive(), f"maintenance exited:\n{loop.stderr()}"
        return "pass failed: cannot reach DynamoDB" in loop.stderr()

    wait_until(failed_once, CLI_TIMEOUT_SECONDS, "a failed pass")
    assert loop.alive()
    loop.process.send_signal(signal.SIGTERM)
    assert loop.process.wait(timeout=CLI_TIMEOUT_SECONDS) == 0, loop.stderr()


def _running_lease(cli: Cli, worker: Started, markers: Path, run_id: str) -> dict[str, Any]:
    """The lease of ``run_id`` once the worker's handler runs it."""

    def started() -> bool:
        assert worker.alive(), f"worker exited early:\n{worker.stderr()[-3000:]}"
        return (markers / f"{run_id}.started-1").exists()

    wait_until(started, CLI_TIMEOUT_SECONDS, "the handler to start")
    run = cli("runs", "get", run_id, "--json").json()
    assert run["status"] == "running"
    lease: dict[str, Any] = run["lease"]
    return lease


def _stop(worker: Started) -> None:
    worker.process.send_signal(signal.SIGTERM)  # the patient handler sees its cancellation
    assert worker.process.wait(timeout=CLI_TIMEOUT_SECONDS) == 0, worker.stderr()[-3000:]


@pytest.mark.parametrize(
    ("args", "env", "owner"),
    [
        (("--worker-id", "ops-box-7"), {}, "ops-box-7"),
        ((), {"RUNLANE_WORKER_ID": "ecs-task-7f3a"}, "ecs-task-7f3a"),
    ],
    ids=["option", "variable"],
)
def test_the_lease_owner_of_a_running_run_is_the_worker_id_given(
    cli: Cli,
    provisioned: dict[str, str],
    markers: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    owner: str,
) -> None:
    run_id = cli("trigger", PATIENT, "--payload", "{}", "--json").json()["id"]
    worker = cli.start("worker", *args, env=env)

    assert _running_lease(cli, worker, markers, run_id)["owner"] == owner
    assert f"worker {owner} consuming" in worker.stderr()
    _stop(worker)


def test_by_default_the_lease_owner_names_the_host_and_the_process_and_lease_seconds_apply(
    cli: Cli, provisioned: dict[str, str], markers: Path
) -> None:
    """A worker given only ``--lease-seconds 30`` (the shop app's lease is 3 s)."""
    run_id = cli("trigger", PATIENT, "--payload", "{}", "--json").json()["id"]
    worker = cli.start("worker", "--lease-seconds", "30")

    lease = _running_lease(cli, worker, markers, run_id)

    host = re.sub(r"[^A-Za-z0-9.-]+", "-", socket.gethostname()).strip(".-")[:63]
    pattern = rf"worker-{re.escape(host)}-{worker.process.pid}-[0-9a-f]{{6}}"
    assert re.fullmatch(pattern, lease["owner"]), lease["owner"]
    left = datetime.fromisoformat(lease["expires_at"]) - datetime.now(UTC)
    assert 10 < left.total_seconds() <= 30  # renewed every 10 s; the app's lease: 3 s
    _stop(worker)


def test_a_lease_under_3_seconds_is_a_usage_error(cli: Cli) -> None:
    done = cli("worker", "--drain", "--lease-seconds", "1")

    assert done.code == 2
    assert "--lease-seconds" in done.stderr


def test_a_command_s_emf_metrics_are_written_when_it_ends(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    done = cli.ok("maintenance", "run", "--once", env={"RUNLANE_METRICS": "emf"})

    report, *metrics = [json.loads(line) for line in done.stdout.splitlines()]
    assert "jobs" in report  # the command's own output comes first, unchanged
    (pass_line,) = [m for m in metrics if "runlane.maintenance.duration" in m]
    (directive,) = pass_line["_aws"]["CloudWatchMetrics"]
    assert {"Name": "runlane.maintenance.duration", "Unit": "Seconds"} in directive["Metrics"]
