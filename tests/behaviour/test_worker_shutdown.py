"""How attempts end early, the same with the sync ``Worker`` and the asyncio
``AsyncWorker`` (``worker_kind``), on every backend: a lost lease, a cancellation, a
worker stopping.

Every write an attempt makes is fenced by its lease token: once maintenance expired the
lease and another worker claimed the run, the old attempt's outcome is discarded, and its
handler learns at its next heartbeat that it lost the lease. Cancelling a running run
reaches its handler at the next heartbeat. Stopping a worker sets the cancellation of
in-flight attempts, lets them finish within the grace period, and leaves those that
ignore it to lease expiry. Handlers are a ``def`` and an ``async def`` one each time.

At the end, real async worker processes (on the emulators only) stop on SIGTERM and
SIGINT with exit code 0, an idle one once the long poll it is in returns; a second
signal exits at once with 128 + the signal, naming the runs left to lease expiry.

The clock moves by hand; where heartbeats must fire the lease is the shortest allowed
(3 s: a heartbeat every second of real time).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus, TaskContext
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.engine.context import Cancellation
from runlane_sqs.engine.reports import JOB_EXPIRED
from tests.apps.async_worker import ASYNC_PATIENT_TASK, GRACE_ENV, register_async_patient
from tests.apps.tasks import MARKERS_ENV, PATIENT_TASK, STUBBORN_TASK
from tests.backends import Backend
from tests.behaviour.worker_support import (
    LONG_LEASE,
    claim_elsewhere,
    event_types,
    second_app,
    status,
)
from tests.emulators import REPO_ROOT, queue_counts, queue_url, subprocess_env, wait_until
from tests.workers import WorkerKind

SHORT_LEASE_SECONDS = 3
"""The shortest lease allowed: heartbeats every second."""
TIMEOUT_SECONDS = 20.0

FENCED = "shutdown.fenced"
ZOMBIE = "shutdown.zombie"
PATIENT_SYNC = "shutdown.patient-sync"
PATIENT_ASYNC = "shutdown.patient-async"
STUBBORN_SYNC = "shutdown.stubborn-sync"
STUBBORN_ASYNC = "shutdown.stubborn-async"


class Tasks:
    """This file's tasks. Attempt 1 of each blocks: ``fenced`` and the stubborn ones
    until ``let_go`` is set (ignoring cancellation), ``zombie`` and the patient ones
    until their cancellation is set."""

    def __init__(self) -> None:
        self.started = {
            task: threading.Event()
            for task in (FENCED, ZOMBIE, PATIENT_SYNC, PATIENT_ASYNC, STUBBORN_SYNC, STUBBORN_ASYNC)
        }
        self.let_go = Cancellation()  # a threading.Event both kinds of handler can await
        self.returned = threading.Semaphore(0)
        self.began: dict[str, tuple[str, int, bool]] = {}
        """Per task: the run id, the attempt and whether it was cancelled at the start."""
        self.observed: dict[str, bool] = {}
        """Per task: whether its handler saw the cancellation before it returned."""

    def register(self, app: Runlane) -> None:
        app.task(self.fenced, name=FENCED)
        app.task(self.zombie, name=ZOMBIE)
        app.task(self.patient_sync, name=PATIENT_SYNC)
        app.task(self.patient_async, name=PATIENT_ASYNC)
        app.task(self.stubborn_sync, name=STUBBORN_SYNC)
        app.task(self.stubborn_async, name=STUBBORN_ASYNC)

    def _start(self, ctx: TaskContext) -> None:
        self.began[ctx.task] = (ctx.run_id, ctx.attempt, ctx.cancelled)
        self.started[ctx.task].set()

    def wait_started(self, *tasks: str) -> None:
        for task in tasks:
            assert self.started[task].wait(TIMEOUT_SECONDS), f"{task} never started"

    def fenced(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            self._start(ctx)
            assert self.let_go.wait(timeout=TIMEOUT_SECONDS)
        return {"worker": ctx.worker_id, "attempt": ctx.attempt}

    async def zombie(self, ctx: TaskContext, payload: Any) -> Any:
        self._start(ctx)
        await asyncio.wait_for(ctx.until_cancelled(), TIMEOUT_SECONDS)
        self.observed[ctx.task] = ctx.cancelled
        return {"zombie": True}

    def patient_sync(self, ctx: TaskContext, payload: Any) -> Any:
        self._start(ctx)
        self.observed[ctx.task] = ctx.cancellation.wait(timeout=TIMEOUT_SECONDS)
        return {"cancelled": self.observed[ctx.task]}

    async def patient_async(self, ctx: TaskContext, payload: Any) -> Any:
        self._start(ctx)
        try:
            await asyncio.wait_for(ctx.until_cancelled(), TIMEOUT_SECONDS)
        except TimeoutError:
            self.observed[ctx.task] = False
        else:
            self.observed[ctx.task] = True
        return {"cancelled": self.observed[ctx.task]}

    def stubborn_sync(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            self._start(ctx)
            try:
                self.let_go.wait(timeout=60)
            finally:
                self.returned.release()
        return {"attempt": ctx.attempt}

    async def stubborn_async(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            self._start(ctx)
            try:
                await asyncio.wait_for(self.let_go.wait_async(), 60)
            finally:
                self.returned.release()
        return {"attempt": ctx.attempt}


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    """Heartbeats never fire: leases expire only when the test moves the clock."""
    return backend.app(register=tasks.register, lease_duration=LONG_LEASE)


@pytest.fixture
def beating_app(backend: Backend, tasks: Tasks) -> Runlane:
    """Heartbeats every second of real time."""
    return backend.app(register=tasks.register, lease_duration=SHORT_LEASE_SECONDS)


# --- fencing --------------------------------------------------------------------------


def test_an_outcome_after_maintenance_expired_the_lease_is_discarded(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    """Worker A's handler blocks while its lease expires; maintenance makes the run
    runnable again and worker B runs attempt 2 to success; when A's handler returns,
    its result is discarded."""
    app_b = second_app(backend, app, tasks.register, lease_duration=app.config.lease_duration)
    run = app.trigger(FENCED, None)

    with worker_kind.draining(app, worker_id="worker-a") as drain_a:
        try:
            tasks.wait_started(FENCED)
            backend.clock.advance(LONG_LEASE + timedelta(seconds=1))
            assert app_b.maintenance.run_pass().jobs[JOB_EXPIRED].published == 1
            assert worker_kind.drain(app_b, worker_id="worker-b") == 1
        finally:
            tasks.let_go.set()
    assert drain_a.join() == 1

    final = app.runs.get(run.id)
    assert (final.status, final.result) == (
        RunStatus.SUCCEEDED,
        {"worker": "worker-b", "attempt": 2},
    )
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_worker_learns_at_its_heartbeat_that_it_lost_the_lease_and_records_nothing(
    worker_kind: WorkerKind, beating_app: Runlane, tasks: Tasks
) -> None:
    """The lease is taken over while the handler runs; the next heartbeat is refused,
    which sets the handler's cancellation; what the handler returns then is discarded."""
    app = beating_app
    run = app.trigger(ZOMBIE, None)
    with worker_kind.draining(app, worker_id="worker-a") as drain_a:
        tasks.wait_started(ZOMBIE)
        stored = app.runs.get(run.id)
        assert stored.lease is not None
        later = stored.lease.expires_at + timedelta(seconds=1)  # as if heartbeats had stopped
        expired = expire_lease(stored, now=later)
        assert isinstance(expired, Transition), expired
        app.store.apply(expired)
        successor = claim_elsewhere(app, run.id, owner="worker-b", now=later)
    assert drain_a.join() == 1

    assert tasks.observed == {ZOMBIE: True}
    final = app.runs.get(run.id)
    assert (final.status, final.attempt, final.lease, final.result) == (
        RunStatus.RUNNING,
        2,
        successor.lease,
        None,
    )
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
    ]


# --- cancellation and shutdown --------------------------------------------------------


def test_cancelling_running_runs_reaches_their_handlers_at_the_next_heartbeat(
    worker_kind: WorkerKind, beating_app: Runlane, tasks: Tasks
) -> None:
    app = beating_app
    runs = [app.trigger(PATIENT_SYNC), app.trigger(PATIENT_ASYNC)]
    with worker_kind.running(app, concurrency=2):
        tasks.wait_started(PATIENT_SYNC, PATIENT_ASYNC)
        for run in runs:
            asked = app.runs.cancel(run.id, reason="user asked", actor="alice")
            assert asked.status is RunStatus.CANCEL_REQUESTED
        wait_until(
            lambda: all(status(app, run.id) is RunStatus.CANCELLED for run in runs),
            TIMEOUT_SECONDS,
            "both runs to end cancelled",
        )

    assert tasks.observed == {PATIENT_SYNC: True, PATIENT_ASYNC: True}
    for run in runs:
        final = app.runs.get(run.id)
        assert (final.attempt, final.lease) == (1, None)
        events = app.runs.events(run.id)
        assert [e.type for e in events] == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.CANCEL_REQUESTED,
            EventType.CANCELLED,
        ]
        assert events[2].data == {"actor": "alice", "reason": "user asked"}
        assert events[3].data == {"after": "succeeded"}


def test_stop_sets_the_cancellation_and_lets_in_flight_attempts_finish_within_the_grace_period(
    worker_kind: WorkerKind, backend: Backend, beating_app: Runlane, tasks: Tasks
) -> None:
    app = beating_app
    runs = [app.trigger(PATIENT_SYNC), app.trigger(PATIENT_ASYNC)]
    with worker_kind.running(app, concurrency=2) as started:
        tasks.wait_started(PATIENT_SYNC, PATIENT_ASYNC)
        started.stop()

    assert tasks.began == {
        PATIENT_SYNC: (runs[0].id, 1, False),
        PATIENT_ASYNC: (runs[1].id, 1, False),
    }
    assert tasks.observed == {PATIENT_SYNC: True, PATIENT_ASYNC: True}
    for run in runs:
        final = app.runs.get(run.id)
        assert (final.status, final.result, final.attempt) == (
            RunStatus.SUCCEEDED,
            {"cancelled": True},
            1,
        )
    assert backend.depth(app) == 0


def test_attempts_that_ignore_cancellation_past_the_grace_period_are_left_to_lease_expiry(
    worker_kind: WorkerKind,
    backend: Backend,
    app: Runlane,
    tasks: Tasks,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    runs = [app.trigger(STUBBORN_SYNC), app.trigger(STUBBORN_ASYNC)]
    with worker_kind.running(app, concurrency=2, grace_period=1) as started:
        tasks.wait_started(STUBBORN_SYNC, STUBBORN_ASYNC)
        started.stop()

    assert "still running after the grace period" in caplog.text
    for run in runs:
        stored = app.runs.get(run.id)
        assert (stored.status, stored.attempt, stored.failures) == (RunStatus.RUNNING, 1, 0)
        assert stored.lease is not None
        assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.STARTED]

    # The leases expire; maintenance makes the same runs runnable again; attempt 2 runs.
    backend.clock.advance(LONG_LEASE + timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].published == 2
    assert worker_kind.drain(app, concurrency=2) == 2

    # The abandoned attempts return at last: nothing they do is recorded.
    tasks.let_go.set()
    for _ in runs:
        assert tasks.returned.acquire(timeout=TIMEOUT_SECONDS)
    if not worker_kind.cancels_abandoned_attempts:
        wait_until(
            lambda: caplog.text.count("outcome discarded") == 2,
            TIMEOUT_SECONDS,
            "the abandoned attempts to finish",
        )
    for run in runs:
        final = app.runs.get(run.id)
        assert (final.status, final.result, final.attempt, final.failures) == (
            RunStatus.SUCCEEDED,
            {"attempt": 2},
            2,
            0,
        )
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.LEASE_EXPIRED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]
    assert worker_kind.drain(app) == 0


# --- a real async worker process (emulators only) -------------------------------------

ASYNC_WORKER_MODULE = "tests.apps.async_worker"
GRACE_SECONDS = 10
STARTUP_TIMEOUT_SECONDS = 30
IDLE_STOP_SECONDS = 5
"""The worker's 1 s long poll (``tests.apps.async_worker``) and a margin: a stop waits
for the poll it is in; a second signal does not even do that."""
EMPTY = {"visible": 0, "in_flight": 0, "delayed": 0}


class AsyncWorkerProcess:
    """``python -m tests.apps.async_worker``, its log kept in a file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", ASYNC_WORKER_MODULE],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait_for(self, path: Path) -> None:
        def there() -> bool:
            assert self.process.poll() is None, f"worker exited early:\n{self.log()}"
            return path.exists()

        wait_until(there, STARTUP_TIMEOUT_SECONDS, f"{path.name}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


@pytest.fixture
def start_async_worker(
    backend_env: dict[str, str], tmp_path: Path, markers: Path
) -> Iterator[Callable[[float], AsyncWorkerProcess]]:
    """Start async worker processes with a grace period; any still running are killed."""
    started: list[AsyncWorkerProcess] = []

    def start(grace: float) -> AsyncWorkerProcess:
        env = {
            **subprocess_env(backend_env),
            MARKERS_ENV: str(markers),
            GRACE_ENV: str(grace),
        }
        worker = AsyncWorkerProcess(env, tmp_path / f"async-worker-{len(started)}.err")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.fixture
def process_app(make_app: Callable[..., Runlane]) -> Runlane:
    app = register_async_patient(make_app())
    app.provision()
    return app


def test_sigterm_lets_an_async_worker_process_finish_its_attempts_and_exit_0(
    process_app: Runlane,
    start_async_worker: Callable[[float], AsyncWorkerProcess],
    markers: Path,
    sqs: Any,
) -> None:
    runs = [
        process_app.trigger(PATIENT_TASK, {"wait_seconds": 30}),
        process_app.trigger(ASYNC_PATIENT_TASK, {"wait_seconds": 30}),
    ]
    worker = start_async_worker(GRACE_SECONDS)
    for run in runs:
        worker.wait_for(markers / f"{run.id}.started")
        assert status(process_app, run.id) is RunStatus.RUNNING

    worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(timeout=GRACE_SECONDS + 15)

    assert code == 0, worker.log()
    for run in runs:
        assert (markers / f"{run.id}.finished").read_text() == "cancelled"
        final = process_app.runs.get(run.id)
        assert (final.status, final.result, final.attempt) == (
            RunStatus.SUCCEEDED,
            {"cancelled": True},
            1,
        )
    assert queue_counts(sqs, queue_url(sqs, process_app)) == EMPTY


def test_an_async_worker_process_leaves_a_stubborn_attempt_to_lease_expiry(
    process_app: Runlane,
    start_async_worker: Callable[[float], AsyncWorkerProcess],
    markers: Path,
) -> None:
    run = process_app.trigger(STUBBORN_TASK, {"seconds": 60})
    worker = start_async_worker(1)
    worker.wait_for(markers / f"{run.id}.started")

    worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(timeout=30)

    assert code == 0, worker.log()
    assert "still running after the grace period" in worker.log()
    assert not (markers / f"{run.id}.finished").exists()
    stored = process_app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.RUNNING, 1)
    assert stored.lease is not None
    assert event_types(process_app, run.id) == [EventType.TRIGGERED, EventType.STARTED]


def test_sigint_stops_an_idle_async_worker_process_with_exit_code_0(
    start_async_worker: Callable[[float], AsyncWorkerProcess], process_app: Runlane
) -> None:
    worker = start_async_worker(GRACE_SECONDS)
    wait_until(lambda: "consuming" in worker.log(), STARTUP_TIMEOUT_SECONDS, "the worker to start")
    worker.process.send_signal(signal.SIGINT)
    assert worker.process.wait(timeout=GRACE_SECONDS + 15) == 0, worker.log()


def test_sigterm_stops_an_idle_async_worker_process_once_its_long_poll_returns(
    start_async_worker: Callable[[float], AsyncWorkerProcess], process_app: Runlane
) -> None:
    worker = start_async_worker(GRACE_SECONDS)
    wait_until(lambda: "consuming" in worker.log(), STARTUP_TIMEOUT_SECONDS, "the worker to start")

    worker.process.send_signal(signal.SIGTERM)  # the worker is in its first 1 s long poll

    assert worker.process.wait(timeout=IDLE_STOP_SECONDS) == 0, worker.log()


def test_a_second_sigint_exits_an_async_worker_process_at_once_naming_the_runs_left(
    process_app: Runlane,
    start_async_worker: Callable[[float], AsyncWorkerProcess],
    markers: Path,
) -> None:
    run = process_app.trigger(STUBBORN_TASK, {"seconds": 60})
    worker = start_async_worker(60)
    worker.wait_for(markers / f"{run.id}.started")
    worker.process.send_signal(signal.SIGINT)
    wait_until(lambda: "stopping" in worker.log(), STARTUP_TIMEOUT_SECONDS, "the first stop")

    worker.process.send_signal(signal.SIGINT)

    assert worker.process.wait(timeout=IDLE_STOP_SECONDS) == 128 + signal.SIGINT, worker.log()
    assert f"1 run(s) left to lease expiry: {run.id}" in worker.log()
