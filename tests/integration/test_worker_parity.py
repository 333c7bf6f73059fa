"""The sync worker and the asyncio worker keep the same semantics on DynamoDB and SQS.

Every test here runs twice, once per worker kind (``kind``: ``Worker`` and
``AsyncWorker``, driven through :class:`tests.workers.WorkerKind`), with the same body:
success, retries, releases, token and run waits, durable steps, wakeups that must not
execute anything (semantics 4), ``drain(max_runs=N)`` (14), fencing (3), cancellation
(15) and cooperative shutdown (13). Handlers are a mix of ``def`` and ``async def``:
each worker kind runs both.

Time moves by hand (``ManualClock``) except where heartbeats must fire: cancellation and
shutdown use the wall clock and the shortest lease (3 s, a heartbeat every second).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, ManualClock, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.cancellation import Cancellation
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.core.names import new_lease_token
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.maintenance import JOB_DUE, JOB_EXPIRED, Maintenance, PassReport
from tests.integration.apps.async_worker import (
    ASYNC_PATIENT_TASK,
    GRACE_ENV,
    register_async_patient,
)
from tests.integration.apps.tasks import MARKERS_ENV, PATIENT_TASK, STUBBORN_TASK
from tests.integration.conftest import (
    REPO_ROOT,
    queue_counts,
    queue_url,
    subprocess_env,
    wait_until,
)
from tests.integration.wakeups import forged_bodies, send_bodies
from tests.workers import KINDS, WorkerKind

START = datetime(2030, 1, 1, tzinfo=UTC)
EMPTY = {"visible": 0, "in_flight": 0, "delayed": 0}
LONG_LEASE = timedelta(minutes=5)
"""Long in real time too: heartbeats (every third of it) never fire during a test."""
SHORT_LEASE_SECONDS = 3
"""The shortest lease allowed: heartbeats every second."""
TIMEOUT_SECONDS = 20.0
RETRY_AT_ONCE = RetryPolicy(max_attempts=3, backoff="fixed", delay=0)


class Flaky(Exception):
    """Raised by the test handlers."""


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> WorkerKind:
    return WorkerKind(request.param)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    return make_app(clock=clock, lease_duration=LONG_LEASE)


@pytest.fixture
def live_app(make_app: Callable[..., Runlane]) -> Runlane:
    """Wall-clock time and a 3 s lease: heartbeats every second."""
    return make_app(lease_duration=SHORT_LEASE_SECONDS)


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def status(app: Runlane, run_id: str) -> RunStatus:
    return app.runs.get(run_id).status


def published(report: PassReport, job: str) -> int:
    return report.jobs[job].published


def wakeup_body(app: Runlane, run_id: str) -> str:
    return Wakeup(
        environment=app.config.environment,
        run_id=run_id,
        queue="default",
        requested_at=app.clock.now(),
    ).to_json()


def claim_elsewhere(
    app: Runlane, run_id: str, owner: str = "worker-elsewhere", now: datetime | None = None
) -> Run:
    """Claim the run's lease as another worker would (a conditional write)."""
    decision = machine.claim_lease(
        app.runs.get(run_id),
        now=now or app.clock.now(),
        owner=owner,
        token=new_lease_token(),
        duration=app.config.lease_duration,
    )
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)


def purge(sqs: Any, url: str) -> None:
    sqs.purge_queue(QueueUrl=url)
    assert queue_counts(sqs, url) == EMPTY


# --- success, retries, steps ----------------------------------------------------------


def test_sync_and_async_handlers_succeed(kind: WorkerKind, app: Runlane, sqs: Any) -> None:
    @app.task(name="parity.plain")
    def plain(ctx: TaskContext, payload: Any) -> Any:
        return {"plain": payload, "attempt": ctx.attempt}

    @app.task(name="parity.coroutine")
    async def coroutine(ctx: TaskContext, payload: Any) -> Any:
        await asyncio.sleep(0)
        return {"coroutine": payload, "attempt": ctx.attempt}

    app.provision()
    first = app.trigger("parity.plain", {"n": 1})
    second = app.trigger("parity.coroutine", {"n": 2})

    assert kind.drain(app, concurrency=2) == 2

    done = app.runs.get(first.id)
    assert (done.status, done.result, done.lease) == (
        RunStatus.SUCCEEDED,
        {"plain": {"n": 1}, "attempt": 1},
        None,
    )
    done = app.runs.get(second.id)
    assert (done.status, done.result) == (
        RunStatus.SUCCEEDED,
        {"coroutine": {"n": 2}, "attempt": 1},
    )
    for run in (first, second):
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]
    assert queue_counts(sqs, queue_url(sqs, app)) == EMPTY


def test_a_failed_attempt_is_retried_and_history_keeps_the_failure(
    kind: WorkerKind, app: Runlane
) -> None:
    @app.task(name="parity.flaky", retry=RETRY_AT_ONCE)
    async def flaky(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise Flaky("attempt 1 failed")
        return {"attempt": ctx.attempt}

    app.provision()
    run = app.trigger("parity.flaky", None)

    assert kind.drain(app) == 2

    done = app.runs.get(run.id)
    assert (done.status, done.attempt, done.failures, done.result) == (
        RunStatus.SUCCEEDED,
        2,
        1,
        {"attempt": 2},
    )
    events = app.runs.events(run.id)
    assert [e.type for e in events] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.ATTEMPT_FAILED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    failure = events[2].data["failure"]
    assert (events[2].attempt, failure["message"]) == (1, "attempt 1 failed")
    assert failure["type"].endswith("Flaky")


def test_a_durable_step_runs_once_across_attempts(kind: WorkerKind, app: Runlane) -> None:
    charges: list[int] = []

    def charge(attempt: int) -> dict[str, str]:
        charges.append(attempt)
        return {"charge": f"ch-{attempt}"}

    @app.task(name="parity.checkout", retry=RETRY_AT_ONCE)
    def checkout(ctx: TaskContext, payload: Any) -> Any:
        receipt = ctx.step("charge", lambda: charge(ctx.attempt))
        if ctx.attempt == 1:
            raise Flaky("the mail server is down")
        return receipt

    app.provision()
    run = app.trigger("parity.checkout", {"order": 7})

    assert kind.drain(app) == 2

    assert charges == [1]
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.attempt) == (
        RunStatus.SUCCEEDED,
        {"charge": "ch-1"},
        2,
    )
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.STEP_RECORDED,
        EventType.ATTEMPT_FAILED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


# --- waits ----------------------------------------------------------------------------


def test_a_release_resumes_after_its_delay_through_maintenance(
    kind: WorkerKind, app: Runlane, clock: ManualClock, sqs: Any
) -> None:
    starts: list[int] = []

    @app.task(name="parity.later")
    async def later(ctx: TaskContext, payload: Any) -> Any:
        starts.append(ctx.attempt)
        if ctx.attempt == 1:
            ctx.release(delay=timedelta(hours=3))
        return {"attempt": ctx.attempt}

    app.provision()
    run = app.trigger("parity.later", None)

    assert kind.drain(app) == 1
    released = app.runs.get(run.id)
    assert released.status is RunStatus.RELEASED
    assert released.due_at == START + timedelta(hours=3)
    assert (released.failures, released.failure, released.lease) == (0, None, None)
    assert queue_counts(sqs, queue_url(sqs, app)) == EMPTY

    clock.advance(timedelta(hours=3))
    assert published(app.maintenance.run_pass(), JOB_DUE) == 1
    assert kind.drain(app) == 1

    assert starts == [1, 2]
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.failures) == (RunStatus.SUCCEEDED, {"attempt": 2}, 0)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.RELEASED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_token_completion_resumes_the_waiter_without_a_maintenance_pass(
    kind: WorkerKind, app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pass(self: Maintenance, **_: Any) -> PassReport:
        raise AssertionError("this test runs no maintenance pass")

    monkeypatch.setattr(Maintenance, "run_pass", no_pass)
    starts: list[int] = []

    @app.task(name="parity.approval")
    async def approval(ctx: TaskContext, payload: Any) -> Any:
        starts.append(ctx.attempt)
        return ctx.wait_for_token(payload["token"]).value

    app.provision()
    token = app.tokens.create()
    run = app.trigger("parity.approval", {"token": token.id})

    assert kind.drain(app) == 1
    waiting = app.runs.get(run.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.TOKEN, token.id)
    assert waiting.lease is None

    app.tokens.complete(token.id, {"approved": "yes"})
    assert kind.drain(app) == 1

    assert starts == [1, 2]
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.attempt, done.failures) == (
        RunStatus.SUCCEEDED,
        {"approved": "yes"},
        2,
        0,
    )
    assert event_types(app, run.id).count(EventType.TOKEN_COMPLETED) == 1


def test_wait_for_run_resumes_the_parent_when_the_child_finishes(
    kind: WorkerKind, app: Runlane
) -> None:
    @app.task(name="parity.child")
    def child(ctx: TaskContext, payload: Any) -> Any:
        return {"child": ctx.wait_for_token(payload["token"]).value}

    @app.task(name="parity.parent")
    async def parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(payload["child"]).to_json()

    app.provision()
    token = app.tokens.create()
    kid = app.trigger("parity.child", {"token": token.id})
    mother = app.trigger("parity.parent", {"child": kid.id})
    assert kind.drain(app, concurrency=2) == 2
    waiting = app.runs.get(mother.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.RUN, kid.id)

    app.tokens.complete(token.id, "go")
    # the child's attempt 2 finishes and resumes the parent, which runs in the same drain
    assert kind.drain(app) == 2

    assert app.runs.get(mother.id).result == {
        "run_id": kid.id,
        "status": "succeeded",
        "result": {"child": "go"},
        "failure": None,
    }
    resumed = [e for e in app.runs.events(mother.id) if e.type is EventType.RESUMED]
    assert [e.data["run"] for e in resumed] == [kid.id]


# --- wakeups that execute nothing -----------------------------------------------------


def test_stale_duplicate_foreign_malformed_and_unknown_wakeups_are_deleted_uncounted(
    kind: WorkerKind, app: Runlane, sqs: Any
) -> None:
    calls: list[str] = []

    @app.task(name="parity.echo")
    def echo(ctx: TaskContext, payload: Any) -> Any:
        calls.append(ctx.run_id)
        return payload

    app.provision()
    url = queue_url(sqs, app)
    finished = app.trigger("parity.echo", {"state": "terminal"})
    assert kind.drain(app) == 1
    not_due = app.trigger("parity.echo", {"state": "not due"}, delay=timedelta(hours=1))
    leased = app.trigger("parity.echo", {"state": "running elsewhere"})
    purge(sqs, url)
    claim_elsewhere(app, leased.id)
    stale = [finished, not_due, leased]
    before = {run.id: app.runs.get(run.id) for run in stale}
    duplicates = [wakeup_body(app, run.id) for run in stale for _ in range(2)]
    forged = list(forged_bodies(leased.id, app.config.environment).values())
    send_bodies(sqs, url, duplicates + forged)

    assert kind.drain(app, concurrency=2) == 0

    assert calls == [finished.id]
    assert queue_counts(sqs, url) == EMPTY
    for run in stale:
        after = app.runs.get(run.id)
        was = before[run.id]
        assert (after.status, after.seq, after.attempt, after.lease) == (
            was.status,
            was.seq,
            was.attempt,
            was.lease,
        )


def test_a_wakeup_for_a_task_the_worker_does_not_register_stays_on_the_queue(
    kind: WorkerKind, app: Runlane, make_app: Callable[..., Runlane], sqs: Any
) -> None:
    app.task(lambda ctx, payload: payload, name="parity.known")
    producer = make_app()
    producer.task(lambda ctx, payload: payload, name="parity.elsewhere")
    producer.provision()
    run = producer.trigger("parity.elsewhere", {"for": "another worker"})

    assert kind.drain(app) == 0

    counts = queue_counts(sqs, queue_url(sqs, app))
    assert counts["visible"] + counts["in_flight"] == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.QUEUED, 0)


def test_drain_max_runs_counts_only_executed_runs(kind: WorkerKind, app: Runlane, sqs: Any) -> None:
    calls: list[str] = []

    @app.task(name="parity.counted")
    async def counted(ctx: TaskContext, payload: Any) -> Any:
        calls.append(ctx.run_id)
        return payload

    app.provision()
    url = queue_url(sqs, app)
    decoy = app.trigger("parity.counted", {"decoy": True})
    purge(sqs, url)
    send_bodies(sqs, url, list(forged_bodies(decoy.id, app.config.environment).values()))
    runs = app.trigger_many("parity.counted", [{"n": n} for n in range(3)])
    real = {run.id for run in runs}

    assert kind.drain(app, max_runs=2) == 2

    assert len(calls) == 2 and set(calls) < real
    assert sorted(status(app, run_id).value for run_id in real) == [
        "queued",
        "succeeded",
        "succeeded",
    ]
    assert kind.drain(app) == 1
    assert set(calls) == real
    assert queue_counts(sqs, url) == EMPTY
    assert status(app, decoy.id) is RunStatus.QUEUED


# --- fencing --------------------------------------------------------------------------


def test_an_outcome_after_maintenance_expired_the_lease_is_discarded(
    kind: WorkerKind, make_app: Callable[..., Runlane], clock: ManualClock
) -> None:
    """Worker A's handler blocks while its lease expires; maintenance makes the run
    runnable again and worker B runs attempt 2 to success; when A's handler returns,
    its result is discarded."""
    a_started, a_may_return = threading.Event(), threading.Event()

    def handler(ctx: TaskContext, payload: Any) -> dict[str, Any]:
        if ctx.attempt == 1:
            a_started.set()
            assert a_may_return.wait(timeout=TIMEOUT_SECONDS)
        return {"worker": ctx.worker_id, "attempt": ctx.attempt}

    app_a = make_app(clock=clock, lease_duration=LONG_LEASE)
    app_b = make_app(clock=clock, lease_duration=LONG_LEASE)
    for each in (app_a, app_b):
        each.task(handler, name="parity.fenced")
    app_a.provision()
    run = app_a.trigger("parity.fenced", None)

    with kind.draining(app_a, worker_id="worker-a") as drain_a:
        try:
            assert a_started.wait(timeout=TIMEOUT_SECONDS), "worker A never started"
            clock.advance(LONG_LEASE + timedelta(seconds=1))
            assert published(app_b.maintenance.run_pass(), JOB_EXPIRED) == 1
            assert kind.drain(app_b, worker_id="worker-b") == 1
        finally:
            a_may_return.set()
    assert drain_a.join() == 1

    final = app_a.runs.get(run.id)
    assert (final.status, final.result) == (
        RunStatus.SUCCEEDED,
        {"worker": "worker-b", "attempt": 2},
    )
    assert event_types(app_a, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_worker_learns_at_its_heartbeat_that_it_lost_the_lease_and_records_nothing(
    kind: WorkerKind, live_app: Runlane
) -> None:
    """The lease is taken over while the handler runs; the next heartbeat is refused,
    which sets the handler's cancellation; what the handler returns then is discarded."""
    started = threading.Event()
    observed: dict[str, Any] = {}

    @live_app.task(name="parity.zombie")
    async def zombie(ctx: TaskContext, payload: Any) -> Any:
        started.set()
        await asyncio.wait_for(ctx.until_cancelled(), TIMEOUT_SECONDS)
        observed["cancelled"] = ctx.cancelled
        return {"zombie": True}

    live_app.provision()
    run = live_app.trigger("parity.zombie", None)
    with kind.draining(live_app, worker_id="worker-a") as drain_a:
        assert started.wait(TIMEOUT_SECONDS), "the handler never started"
        stored = live_app.runs.get(run.id)
        assert stored.lease is not None
        later = stored.lease.expires_at + timedelta(seconds=1)  # as if heartbeats had stopped
        expired = expire_lease(stored, now=later)
        assert isinstance(expired, Transition), expired
        live_app.store.apply(expired)
        successor = claim_elsewhere(live_app, run.id, owner="worker-b", now=later)
    assert drain_a.join() == 1

    assert observed == {"cancelled": True}
    final = live_app.runs.get(run.id)
    assert (final.status, final.attempt, final.lease, final.result) == (
        RunStatus.RUNNING,
        2,
        successor.lease,
        None,
    )
    assert event_types(live_app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
    ]


# --- cancellation and shutdown --------------------------------------------------------


class Patient:
    """A ``def`` and an ``async def`` handler that work until cancelled, then return."""

    SYNC_TASK = "parity.patient-sync"
    ASYNC_TASK = "parity.patient-async"

    def __init__(self, app: Runlane) -> None:
        self.started: dict[str, threading.Event] = {
            self.SYNC_TASK: threading.Event(),
            self.ASYNC_TASK: threading.Event(),
        }
        self.observed: dict[str, bool] = {}
        """Per task: whether its handler saw the cancellation before it returned."""
        app.task(self.patient_sync, name=self.SYNC_TASK)
        app.task(self.patient_async, name=self.ASYNC_TASK)

    def patient_sync(self, ctx: TaskContext, payload: Any) -> Any:
        self.started[ctx.task].set()
        self.observed[ctx.task] = ctx.cancellation.wait(timeout=TIMEOUT_SECONDS)
        return {"cancelled": self.observed[ctx.task]}

    async def patient_async(self, ctx: TaskContext, payload: Any) -> Any:
        self.started[ctx.task].set()
        try:
            await asyncio.wait_for(ctx.until_cancelled(), TIMEOUT_SECONDS)
        except TimeoutError:
            self.observed[ctx.task] = False
        else:
            self.observed[ctx.task] = True
        return {"cancelled": self.observed[ctx.task]}

    def trigger_both(self, app: Runlane) -> list[Run]:
        return [app.trigger(self.SYNC_TASK), app.trigger(self.ASYNC_TASK)]

    def wait_started(self) -> None:
        for task, event in self.started.items():
            assert event.wait(TIMEOUT_SECONDS), f"{task} never started"


def test_cancelling_running_runs_reaches_their_handlers_at_the_next_heartbeat(
    kind: WorkerKind, live_app: Runlane
) -> None:
    patient = Patient(live_app)
    live_app.provision()
    runs = patient.trigger_both(live_app)
    with kind.running(live_app, concurrency=2):
        patient.wait_started()
        for run in runs:
            asked = live_app.runs.cancel(run.id, reason="user asked", actor="alice")
            assert asked.status is RunStatus.CANCEL_REQUESTED
        for run in runs:
            wait_until(
                lambda run=run: status(live_app, run.id) is RunStatus.CANCELLED,
                TIMEOUT_SECONDS,
                f"{run.task} to end cancelled",
            )

    assert patient.observed == {Patient.SYNC_TASK: True, Patient.ASYNC_TASK: True}
    for run in runs:
        final = live_app.runs.get(run.id)
        assert (final.attempt, final.lease) == (1, None)
        events = live_app.runs.events(run.id)
        assert [e.type for e in events] == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.CANCEL_REQUESTED,
            EventType.CANCELLED,
        ]
        assert events[2].data == {"actor": "alice", "reason": "user asked"}
        assert events[3].data == {"after": "succeeded"}


def test_stop_lets_in_flight_attempts_finish_within_the_grace_period(
    kind: WorkerKind, live_app: Runlane, sqs: Any
) -> None:
    patient = Patient(live_app)
    live_app.provision()
    runs = patient.trigger_both(live_app)
    with kind.running(live_app, concurrency=2) as started:
        patient.wait_started()
        started.stop()

    assert patient.observed == {Patient.SYNC_TASK: True, Patient.ASYNC_TASK: True}
    for run in runs:
        final = live_app.runs.get(run.id)
        assert (final.status, final.result, final.attempt) == (
            RunStatus.SUCCEEDED,
            {"cancelled": True},
            1,
        )
    assert queue_counts(sqs, queue_url(sqs, live_app)) == EMPTY


class Stubborn:
    """A ``def`` and an ``async def`` handler that ignore cancellation in attempt 1 and
    return only when the test lets them go."""

    SYNC_TASK = "parity.stubborn-sync"
    ASYNC_TASK = "parity.stubborn-async"

    def __init__(self, app: Runlane) -> None:
        self.started = threading.Semaphore(0)
        self.returned = threading.Semaphore(0)
        self.let_go = Cancellation()  # a threading.Event both kinds of handler can await
        app.task(self.stubborn_sync, name=self.SYNC_TASK)
        app.task(self.stubborn_async, name=self.ASYNC_TASK)

    def stubborn_sync(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            self.started.release()
            try:
                self.let_go.wait(timeout=60)
            finally:
                self.returned.release()
        return {"attempt": ctx.attempt}

    async def stubborn_async(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            self.started.release()
            try:
                await asyncio.wait_for(self.let_go.wait_async(), 60)
            finally:
                self.returned.release()
        return {"attempt": ctx.attempt}


def test_attempts_that_ignore_cancellation_past_the_grace_period_are_left_to_lease_expiry(
    kind: WorkerKind,
    app: Runlane,
    clock: ManualClock,
    sqs: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    stubborn = Stubborn(app)
    app.provision()
    runs = [app.trigger(Stubborn.SYNC_TASK), app.trigger(Stubborn.ASYNC_TASK)]
    with kind.running(app, concurrency=2, grace_period=1) as started:
        for _ in runs:
            assert stubborn.started.acquire(timeout=TIMEOUT_SECONDS), "a handler never started"
        started.stop()

    assert "still running after the grace period" in caplog.text
    for run in runs:
        stored = app.runs.get(run.id)
        assert (stored.status, stored.attempt, stored.failures) == (RunStatus.RUNNING, 1, 0)
        assert stored.lease is not None
        assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.STARTED]

    # The leases expire; maintenance makes the same runs runnable again; attempt 2 runs.
    clock.advance(LONG_LEASE + timedelta(seconds=1))
    assert published(app.maintenance.run_pass(), JOB_EXPIRED) == 2
    assert kind.drain(app, concurrency=2) == 2

    # The abandoned attempts return at last: nothing they do is recorded.
    stubborn.let_go.set()
    for _ in runs:
        assert stubborn.returned.acquire(timeout=TIMEOUT_SECONDS)
    if not kind.cancels_abandoned_attempts:
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
    assert queue_counts(sqs, queue_url(sqs, app))["visible"] == 0


# --- a real async worker process ------------------------------------------------------

ASYNC_WORKER_MODULE = "tests.integration.apps.async_worker"
GRACE_SECONDS = 10
STARTUP_TIMEOUT_SECONDS = 30


class AsyncWorkerProcess:
    """``python -m tests.integration.apps.async_worker``, its log kept in a file."""

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
