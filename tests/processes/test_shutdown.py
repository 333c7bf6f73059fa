"""Cooperative shutdown of a real worker process.

SIGTERM (what ECS sends) stops receiving, sets the running attempt's cancellation
signal and lets it finish within the grace period; the process then exits 0. An
attempt that ignores cancellation is abandoned at the end of the grace period and
left to lease expiry. An idle worker stops once the long poll it is in returns (SQS
would give what arrives to that poll even after the process exited; the worker hands
back what it brings, tests/processes/test_stop_handback.py), and a second signal exits
at once (128 + the signal), naming the runs left to lease expiry.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from tests.apps.tasks import (
    MARKERS_ENV,
    PATIENT_TASK,
    STUBBORN_TASK,
    register_patient,
)
from tests.emulators import WorkerProcess, queue_counts, queue_url, wait_until

APP = "tests.apps.patient:app"
GRACE_SECONDS = 10
STARTUP_TIMEOUT_SECONDS = 30
IDLE_STOP_SECONDS = 15
"""The worker's 10 s long poll and a margin: a stop waits for the poll it is in."""
AT_ONCE_SECONDS = 5
"""Half the worker's 10 s long poll: a second signal must not wait the poll out."""


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    app = register_patient(make_app())
    app.provision()
    return app


def _start(
    start_worker: Callable[..., WorkerProcess], markers: Path, grace: float
) -> WorkerProcess:
    return start_worker(
        "--app", APP, "--grace-period", str(grace), extra_env={MARKERS_ENV: str(markers)}
    )


def _wait_started(worker: WorkerProcess, marker: Path) -> None:
    def started() -> bool:
        assert worker.process.poll() is None, f"worker exited early:\n{worker.log()}"
        return marker.exists()

    wait_until(started, STARTUP_TIMEOUT_SECONDS, "the handler to start")


def test_sigterm_cancels_the_running_attempt_which_finishes_and_the_worker_exits_0(
    app: Runlane, start_worker: Callable[..., WorkerProcess], markers: Path, sqs: Any
) -> None:
    run = app.trigger(PATIENT_TASK, {"wait_seconds": 30})
    worker = _start(start_worker, markers, GRACE_SECONDS)
    _wait_started(worker, markers / f"{run.id}.started")
    assert app.runs.get(run.id).status is RunStatus.RUNNING

    worker.process.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=GRACE_SECONDS + 15)

    assert code == 0, worker.log()
    assert (markers / f"{run.id}.finished").read_text() == "cancelled"
    final = app.runs.get(run.id)
    assert (final.status, final.result, final.attempt) == (
        RunStatus.SUCCEEDED,
        {"cancelled": True},
        1,
    )
    assert queue_counts(sqs, queue_url(sqs, app)) == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_sigint_stops_an_idle_worker_with_exit_code_0(
    app: Runlane, start_worker: Callable[..., WorkerProcess], markers: Path
) -> None:
    run = app.trigger(PATIENT_TASK, {"wait_seconds": 30})
    worker = _start(start_worker, markers, GRACE_SECONDS)
    _wait_started(worker, markers / f"{run.id}.started")
    worker.process.send_signal(signal.SIGINT)
    assert worker.wait(timeout=GRACE_SECONDS + 15) == 0, worker.log()
    assert app.runs.get(run.id).result == {"cancelled": True}

    idle = _start(start_worker, markers, GRACE_SECONDS)
    wait_until(lambda: "consuming" in idle.log(), STARTUP_TIMEOUT_SECONDS, "the worker to start")
    idle.process.send_signal(signal.SIGINT)
    assert idle.wait(timeout=GRACE_SECONDS + 15) == 0, idle.log()


def test_an_attempt_that_ignores_cancellation_is_left_to_lease_expiry(
    app: Runlane, start_worker: Callable[..., WorkerProcess], markers: Path
) -> None:
    run = app.trigger(STUBBORN_TASK, {"seconds": 60})
    worker = _start(start_worker, markers, grace=1)
    _wait_started(worker, markers / f"{run.id}.started")

    worker.process.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=30)

    assert code == 0, worker.log()
    assert "still running after the grace period" in worker.log()
    assert not (markers / f"{run.id}.finished").exists()
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.RUNNING, 1)
    assert stored.lease is not None
    assert [e.type for e in app.runs.events(run.id)] == [EventType.TRIGGERED, EventType.STARTED]


def test_sigterm_stops_an_idle_worker_once_its_long_poll_returns(
    app: Runlane, start_worker: Callable[..., WorkerProcess], markers: Path
) -> None:
    worker = _start(start_worker, markers, GRACE_SECONDS)
    wait_until(lambda: "consuming" in worker.log(), STARTUP_TIMEOUT_SECONDS, "the worker to start")

    worker.process.send_signal(signal.SIGTERM)  # the worker is in its first 10 s long poll

    assert worker.wait(timeout=IDLE_STOP_SECONDS) == 0, worker.log()


def test_a_second_sigterm_exits_at_once_naming_the_runs_left_to_lease_expiry(
    app: Runlane, start_worker: Callable[..., WorkerProcess], markers: Path
) -> None:
    run = app.trigger(STUBBORN_TASK, {"seconds": 60})
    worker = _start(start_worker, markers, grace=60)
    _wait_started(worker, markers / f"{run.id}.started")
    worker.process.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in worker.log(), STARTUP_TIMEOUT_SECONDS, "the first stop")

    worker.process.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=AT_ONCE_SECONDS) == 128 + signal.SIGTERM, worker.log()
    assert "1 run(s) left to lease expiry" in worker.log()
    assert run.id in worker.log()
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.RUNNING, 1)
