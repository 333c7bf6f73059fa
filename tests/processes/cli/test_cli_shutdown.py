"""SIGTERM to a ``runlane-sqs worker`` process in the middle of a handler:
it stops receiving, sets the attempt's cancellation event, waits for the grace period
and exits 0; no run is lost. Run for the sync worker with a sync handler and for the
async worker (``--async``) with an ``async def`` handler."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.processes.cli.apps.names import PATIENT, PATIENT_ASYNC
from tests.processes.cli.conftest import Cli, Started, wait_until

STARTUP_SECONDS = 30

WORKERS = pytest.mark.parametrize(
    ("flags", "task"), [((), PATIENT), (("--async",), PATIENT_ASYNC)], ids=["sync", "async"]
)


def _wait_for_a_start(worker: Started, markers: Path, attempt: int = 1) -> str:
    """The id of the run whose handler started (its marker file appeared)."""
    found: list[str] = []

    def started() -> bool:
        assert worker.alive(), f"worker exited early:\n{worker.stderr()[-3000:]}"
        found.extend(p.name.split(".")[0] for p in markers.glob(f"*.started-{attempt}"))
        return bool(found)

    wait_until(started, STARTUP_SECONDS, "a handler to start")
    return found[0]


@WORKERS
def test_sigterm_cancels_the_running_attempt_lets_it_finish_and_exits_0(
    cli: Cli, provisioned: dict[str, str], markers: Path, flags: tuple[str, ...], task: str
) -> None:
    triggered = [cli("trigger", task, "--payload", "{}", "--json").json()["id"] for _ in "ab"]
    worker = cli.start("--log-format", "json", "worker", "--grace-period", "10", *flags)
    running = _wait_for_a_start(worker, markers)

    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=20) == 0, worker.stderr()[-3000:]

    assert (markers / f"{running}.finished").read_text() == "cancelled"
    finished = cli("runs", "get", running, "--json").json()
    assert (finished["status"], finished["result"]) == ("succeeded", {"cancelled": True})
    (other,) = set(triggered) - {running}
    untouched = cli("runs", "get", other, "--json").json()
    assert (untouched["status"], untouched["attempt"]) == ("queued", 0)  # stopped receiving
    messages = [json.loads(line)["message"] for line in worker.stderr().splitlines()]
    assert "received SIGTERM" in messages


@WORKERS
def test_a_handler_that_ignores_sigterm_is_left_to_lease_expiry_and_recovered(
    cli: Cli, provisioned: dict[str, str], markers: Path, flags: tuple[str, ...], task: str
) -> None:
    run_id = cli("trigger", task, "--payload", '{"stubborn": true}', "--json").json()["id"]
    worker = cli.start("worker", "--grace-period", "1", *flags)
    assert _wait_for_a_start(worker, markers) == run_id

    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=15) == 0, worker.stderr()[-3000:]
    assert "still running after the grace period" in worker.stderr()

    abandoned = cli("runs", "get", run_id, "--json").json()
    assert abandoned["status"] == "running"
    # past the expiry by more than the clock's millisecond truncation
    expired = datetime.fromisoformat(abandoned["lease"]["expires_at"]) + timedelta(seconds=0.1)
    wait_until(lambda: datetime.now(UTC) > expired, 10, "the lease to expire")
    report = cli("maintenance", "run", "--once").json()
    assert report["jobs"]["expired_leases"]["acted"] == 1

    cli.ok("worker", "--drain", *flags)
    shown, history = cli.many(
        [("runs", "get", run_id, "--json"), ("runs", "events", run_id, "--json")]
    )
    recovered = shown.json()
    assert (recovered["status"], recovered["attempt"], recovered["result"]) == (
        "succeeded",
        2,
        {"attempt": 2},
    )
    types = [e["type"] for e in history.json()["events"]]
    assert types == ["triggered", "started", "lease_expired", "started", "succeeded"]
