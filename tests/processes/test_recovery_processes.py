"""Recovery of runs whose worker process died, with real worker processes.

A lease expires when heartbeats stop; maintenance makes the *same* run
runnable again with a ``lease_expired`` event, and fails it with ``lease_lost`` after
too many losses in a row. The workers run with a 3 s lease
(``tests.apps.recovery_worker``); the test process runs maintenance
passes on the wall clock, polling rather than sleeping fixed amounts.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.core.model import Run
from runlane_sqs.core.recovery import LEASE_LOST
from runlane_sqs.engine.reports import JOB_EXPIRED, PassReport
from tests.apps.recovery_tasks import (
    HANGS_FIRST_TASK,
    KILLS_WORKER_TASK,
    MARKERS_ENV,
    WORKER_LEASE_SECONDS,
    register_recovery,
)
from tests.emulators import WorkerProcess, wait_until

WORKER_APP = "tests.apps.recovery_worker:app"
MAX_LEASE_LOSSES = 3
STARTUP_TIMEOUT = 30.0
RECOVERY_TIMEOUT = WORKER_LEASE_SECONDS + 15.0


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    app = register_recovery(make_app(lease_duration=WORKER_LEASE_SECONDS))
    app.provision()
    assert app.maintenance.bounds.max_lease_losses == MAX_LEASE_LOSSES
    return app


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    directory = tmp_path / "markers"
    directory.mkdir()
    return directory


def started(markers: Path, run_id: str, attempt: int) -> Path:
    return markers / f"{run_id}.{attempt}.started"


def recover(app: Runlane, run_id: str, until: Callable[[Run], bool]) -> list[PassReport]:
    """Run maintenance passes until the run satisfies ``until`` (the lease must expire
    first, so the first passes find nothing to do)."""
    reports: list[PassReport] = []

    def recovered() -> bool:
        reports.append(app.maintenance.run_pass())
        return until(app.runs.get(run_id))

    wait_until(recovered, RECOVERY_TIMEOUT, f"maintenance to recover run {run_id}")
    return reports


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def test_a_killed_worker_s_run_is_recovered_and_completed_by_another_worker(
    app: Runlane, markers: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    began = time.monotonic()
    run = app.trigger(HANGS_FIRST_TASK, {"hang_seconds": 60})
    env = {MARKERS_ENV: str(markers)}

    first = start_worker("--app", WORKER_APP, "--drain", extra_env=env)
    wait_until(
        lambda: started(markers, run.id, 1).exists() or first.process.poll() is not None,
        STARTUP_TIMEOUT,
        "the first attempt to start",
    )
    assert started(markers, run.id, 1).exists(), first.log()
    running = app.runs.get(run.id)
    assert running.status is RunStatus.RUNNING
    assert running.attempt == 1
    assert running.lease is not None

    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL

    reports = recover(app, run.id, lambda r: r.status is not RunStatus.RUNNING)
    recovered = app.runs.get(run.id)
    assert recovered.status is RunStatus.QUEUED
    assert recovered.lease is None
    assert recovered.lease_losses == 1
    assert recovered.attempt == 1
    assert sum(r.jobs[JOB_EXPIRED].acted for r in reports) == 1
    assert sum(r.jobs[JOB_EXPIRED].published for r in reports) == 1
    assert event_types(app, run.id)[-1] is EventType.LEASE_EXPIRED
    lease_expired = app.runs.events(run.id)[-1]
    assert lease_expired.data["worker"] == running.lease.owner

    second = start_worker("--app", WORKER_APP, "--drain", extra_env=env)
    assert second.wait(timeout=STARTUP_TIMEOUT) == 0, second.log()
    assert "executed 1 run(s)" in second.output()
    assert started(markers, run.id, 2).exists()

    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.attempt == 2
    assert done.lease_losses == 0
    assert isinstance(done.result, dict) and done.result["attempt"] == 2
    types = event_types(app, run.id)
    assert types == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert types.count(EventType.SUCCEEDED) == 1
    assert time.monotonic() - began < 40


def test_a_run_that_kills_every_worker_fails_with_lease_lost(
    app: Runlane, markers: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    began = time.monotonic()
    run = app.trigger(KILLS_WORKER_TASK, None)
    env = {MARKERS_ENV: str(markers)}

    for loss in range(1, MAX_LEASE_LOSSES + 1):
        worker = start_worker("--app", WORKER_APP, "--drain", extra_env=env)
        code = worker.wait(timeout=STARTUP_TIMEOUT)
        assert code == -signal.SIGKILL, f"worker exited {code}:\n{worker.log()}"
        assert started(markers, run.id, loss).exists()
        assert app.runs.get(run.id).attempt == loss

        recover(app, run.id, lambda r, n=loss: r.lease_losses >= n or r.is_terminal)
        stored = app.runs.get(run.id)
        if loss < MAX_LEASE_LOSSES:
            assert stored.status is RunStatus.QUEUED
            assert stored.lease_losses == loss

    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == LEASE_LOST
    assert failed.attempt == MAX_LEASE_LOSSES
    assert failed.lease is None
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        *[EventType.STARTED, EventType.LEASE_EXPIRED] * MAX_LEASE_LOSSES,
        EventType.FAILED,
    ]
    assert not started(markers, run.id, MAX_LEASE_LOSSES + 1).exists()
    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].examined == 0
    assert time.monotonic() - began < 40
