"""What a worker does with the wakeups it receives, the same with the sync ``Worker`` and
the asyncio ``AsyncWorker`` (``worker_kind``), on every backend.

A runnable run is claimed and executed once, by a ``def`` or an ``async def`` handler,
and its result and history are recorded; a durable step is not repeated by a later
attempt; a released or waiting run resumes when its time, its token or the run it waits
for comes. A wakeup is only a hint: one naming a run that is finished, not yet due,
running under another worker's lease or unknown, and a message that is not a wakeup at
all, is deleted and executes nothing; a wakeup of another environment, or for a task this
worker does not register, is left on the queue for a worker that can run it.
``drain(max_runs=N)`` counts executed runs only and leaves the rest on the queue.

Lost leases, cancellation and shutdown are in test_worker_shutdown.py.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from runlane_sqs import EventType, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core import machine
from runlane_sqs.core.model import WaitKind, new_run_id
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.maintenance import Maintenance
from runlane_sqs.engine.reports import JOB_DUE, PassReport
from tests.backends import Backend
from tests.behaviour.worker_support import (
    LONG_LEASE,
    RETRY_AT_ONCE,
    SYNC_WORKER,
    claim_elsewhere,
    event_types,
    second_app,
    status,
)
from tests.emulators import queue_url
from tests.wakeups import forged_bodies
from tests.workers import WorkerKind

PLAIN = "worker.plain"
COROUTINE = "worker.coroutine"
CHECKOUT = "worker.checkout"
LATER = "worker.later"
APPROVAL = "worker.approval"
CHILD = "worker.child"
PARENT = "worker.parent"
ELSEWHERE = "worker.elsewhere"
"""Registered only by a second app, never by the app under test."""


class Flaky(Exception):
    """Raised by the test handlers."""


class Tasks:
    """This file's tasks, a mix of ``def`` and ``async def`` handlers; each records the
    (task, run id, attempt, payload) it was called with in ``seen``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, Any]] = []
        self.contexts: list[tuple[bool, bool]] = []
        """Per ``PLAIN`` call: is the cancellation a ``threading.Event``; is it set."""
        self.charges: list[int] = []

    def register(self, app: Runlane) -> None:
        app.task(self.plain, name=PLAIN)
        app.task(self.coroutine, name=COROUTINE)
        app.task(self.checkout, name=CHECKOUT, retry=RETRY_AT_ONCE)
        app.task(self.later, name=LATER)
        app.task(self.approval, name=APPROVAL)
        app.task(self.child, name=CHILD)
        app.task(self.parent, name=PARENT)

    def _record(self, ctx: TaskContext, payload: Any) -> None:
        self.seen.append((ctx.task, ctx.run_id, ctx.attempt, payload))

    def plain(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx, payload)
        self.contexts.append((isinstance(ctx.cancellation, threading.Event), ctx.cancelled))
        return {"plain": payload, "attempt": ctx.attempt}

    async def coroutine(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx, payload)
        await asyncio.sleep(0)
        return {"coroutine": payload, "attempt": ctx.attempt}

    def _charge(self, attempt: int) -> dict[str, str]:
        self.charges.append(attempt)
        return {"charge": f"ch-{attempt}"}

    def checkout(self, ctx: TaskContext, payload: Any) -> Any:
        receipt = ctx.step("charge", lambda: self._charge(ctx.attempt))
        if ctx.attempt == 1:
            raise Flaky("the mail server is down")
        return receipt

    async def later(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx, payload)
        if ctx.attempt == 1:
            ctx.release(delay=timedelta(hours=3))
        return {"attempt": ctx.attempt}

    async def approval(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx, payload)
        return ctx.wait_for_token(payload["token"]).value

    def child(self, ctx: TaskContext, payload: Any) -> Any:
        return {"child": ctx.wait_for_token(payload["token"]).value}

    async def parent(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(payload["child"]).to_json()


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register, lease_duration=LONG_LEASE)


def published(report: PassReport, job: str) -> int:
    return report.jobs[job].published


def wakeup_body(app: Runlane, run_id: str, environment: str | None = None) -> str:
    return Wakeup(
        environment=environment or app.config.environment,
        run_id=run_id,
        queue="default",
        requested_at=app.clock.now(),
    ).to_json()


def send_raw(backend: Backend, app: Runlane, bodies: list[str]) -> None:
    """Put messages on the default queue as they are, past the app's publisher."""
    if isinstance(app.transport, InMemoryTransport):
        for body in bodies:
            app.transport.send_raw("default", body)
        return
    sqs = backend.request.getfixturevalue("sqs")
    url = queue_url(sqs, app)
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)


def stored_unpublished(app: Runlane, task: str) -> str:
    """A queued run written straight to storage, with no wakeup on the queue."""
    run, event = machine.new_run(
        run_id=new_run_id(),
        environment=app.config.environment,
        task=task,
        queue="default",
        payload={"direct": True},
        now=app.clock.now(),
    )
    app.store.create_run(run, event, '{"direct":true}')
    return run.id


# --- success and durable steps --------------------------------------------------------


def test_def_and_async_def_handlers_succeed(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    plain = app.trigger(PLAIN, {"n": 1})
    coroutine = app.trigger(COROUTINE, {"n": 2})
    assert (plain.created, plain.status) == (True, RunStatus.QUEUED)

    assert worker_kind.drain(app, concurrency=2) == 2

    assert sorted(tasks.seen) == [
        (COROUTINE, coroutine.id, 1, {"n": 2}),
        (PLAIN, plain.id, 1, {"n": 1}),
    ]
    assert tasks.contexts == [(True, False)]
    done = app.runs.get(plain.id)
    assert (done.status, done.result, done.attempt, done.lease) == (
        RunStatus.SUCCEEDED,
        {"plain": {"n": 1}, "attempt": 1},
        1,
        None,
    )
    done = app.runs.get(coroutine.id)
    assert (done.status, done.result, done.attempt, done.lease) == (
        RunStatus.SUCCEEDED,
        {"coroutine": {"n": 2}, "attempt": 1},
        1,
        None,
    )
    for run in (plain, coroutine):
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]
    assert backend.depth(app) == 0
    assert worker_kind.drain(app) == 0


def test_a_durable_step_runs_once_across_attempts(
    worker_kind: WorkerKind, app: Runlane, tasks: Tasks
) -> None:
    run = app.trigger(CHECKOUT, {"order": 7})

    assert worker_kind.drain(app) == 2

    assert tasks.charges == [1]
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
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    start = backend.clock.now()
    run = app.trigger(LATER, None)

    assert worker_kind.drain(app) == 1
    released = app.runs.get(run.id)
    assert released.status is RunStatus.RELEASED
    assert released.due_at == start + timedelta(hours=3)
    assert (released.failures, released.failure, released.lease) == (0, None, None)
    assert backend.depth(app) == 0

    backend.clock.advance(timedelta(hours=3))
    assert published(app.maintenance.run_pass(), JOB_DUE) == 1
    assert worker_kind.drain(app) == 1

    assert [attempt for _, _, attempt, _ in tasks.seen] == [1, 2]
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
    worker_kind: WorkerKind, app: Runlane, tasks: Tasks, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pass(self: Maintenance, **_: Any) -> PassReport:
        raise AssertionError("this test runs no maintenance pass")

    monkeypatch.setattr(Maintenance, "run_pass", no_pass)
    token = app.tokens.create()
    run = app.trigger(APPROVAL, {"token": token.id})

    assert worker_kind.drain(app) == 1
    waiting = app.runs.get(run.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.TOKEN, token.id)
    assert waiting.lease is None

    app.tokens.complete(token.id, {"approved": "yes"})
    assert worker_kind.drain(app) == 1

    assert [attempt for _, _, attempt, _ in tasks.seen] == [1, 2]
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.attempt, done.failures) == (
        RunStatus.SUCCEEDED,
        {"approved": "yes"},
        2,
        0,
    )
    assert event_types(app, run.id).count(EventType.TOKEN_COMPLETED) == 1


def test_wait_for_run_resumes_the_parent_when_the_child_finishes(
    worker_kind: WorkerKind, app: Runlane
) -> None:
    token = app.tokens.create()
    kid = app.trigger(CHILD, {"token": token.id})
    mother = app.trigger(PARENT, {"child": kid.id})
    assert worker_kind.drain(app, concurrency=2) == 2
    waiting = app.runs.get(mother.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.RUN, kid.id)

    app.tokens.complete(token.id, "go")
    # the child's attempt 2 finishes and resumes the parent, which runs in the same drain
    assert worker_kind.drain(app) == 2

    assert app.runs.get(mother.id).result == {
        "run_id": kid.id,
        "status": "succeeded",
        "result": {"child": "go"},
        "failure": None,
    }
    resumed = [e for e in app.runs.events(mother.id) if e.type is EventType.RESUMED]
    assert [e.data["run"] for e in resumed] == [kid.id]


# --- wakeups that execute nothing -----------------------------------------------------


def test_stale_duplicate_malformed_and_unknown_wakeups_are_deleted_uncounted(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    finished = app.trigger(PLAIN, {"state": "terminal"})
    assert worker_kind.drain(app) == 1
    not_due = app.trigger(PLAIN, {"state": "not due"}, delay=timedelta(hours=1))
    leased = app.trigger(PLAIN, {"state": "running elsewhere"})
    claim_elsewhere(app, leased.id)
    stale = [finished, not_due, leased]
    before = {run.id: app.runs.get(run.id) for run in stale}
    duplicates = [wakeup_body(app, run.id) for run in stale for _ in range(2)]
    forged = list(forged_bodies(leased.id, app.config.environment).values())
    send_raw(backend, app, duplicates + forged)

    assert worker_kind.drain(app, concurrency=2) == 0

    assert [run_id for _, run_id, _, _ in tasks.seen] == [finished.id]
    assert backend.depth(app) == 0
    for run in stale:
        after = app.runs.get(run.id)
        was = before[run.id]
        assert (after.status, after.seq, after.attempt, after.lease) == (
            was.status,
            was.seq,
            was.attempt,
            was.lease,
        )


MALFORMED = {
    "garbage": "garbage",
    "empty": "",
    "empty-object": "{}",
    "list": "[]",
    "version-2": '{"version": 2}',
    "oversized": "x" * 5000,
    "bad-run-id": '{"version":1,"environment":"test","run_id":"nothex","queue":"default",'
    '"requested_at":"2030-01-01T00:00:00+00:00"}',
    "deeply-nested": "[" * 2000 + "]" * 2000,
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_message_is_deleted_and_runs_nothing(
    backend: Backend, app: Runlane, tasks: Tasks, body: str
) -> None:
    try:
        send_raw(backend, app, [body])
    except ClientError as exc:  # AWS SQS refuses an empty body; moto accepts it
        pytest.skip(f"this SQS refuses the message: {exc}")
    assert backend.depth(app) == 1

    assert SYNC_WORKER.drain(app) == 0

    assert backend.depth(app) == 0
    assert tasks.seen == []


def test_a_wakeup_of_another_environment_is_left_on_the_queue_and_runs_nothing(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    run_id = stored_unpublished(app, PLAIN)
    send_raw(backend, app, [wakeup_body(app, run_id, environment="other")])
    assert backend.depth(app) == 1

    assert SYNC_WORKER.drain(app) == 0

    assert backend.depth(app) == 1  # for the workers of "other" (test_environments.py)
    assert tasks.seen == []
    assert status(app, run_id) is RunStatus.QUEUED
    # the same run named in the right environment does run
    send_raw(backend, app, [wakeup_body(app, run_id)])
    assert SYNC_WORKER.drain(app) == 1
    assert tasks.seen == [(PLAIN, run_id, 1, {"direct": True})]
    assert backend.depth(app) == 1


def test_a_wakeup_for_a_task_the_worker_does_not_register_is_left_for_one_that_does(
    worker_kind: WorkerKind, backend: Backend, app: Runlane
) -> None:
    charged: list[Any] = []
    billing = second_app(
        backend, app, lambda other: other.task(lambda ctx, p: charged.append(p), name=ELSEWHERE)
    )
    run = billing.trigger(ELSEWHERE, {"for": "billing"})

    assert worker_kind.drain(app) == 0

    assert backend.depth(app) == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.QUEUED, 0)
    # still queued when its wakeup is due again: maintenance republishes it, unless the
    # wakeup is visible in the queue again after its visibility timeout (the in-memory
    # queue's clock is the test's): then it is only waiting in line. Either way a worker
    # of the app that registers the task runs it
    backend.clock.advance(app.config.republish_after + timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert published(report, JOB_DUE) + report.due.in_line == 1
    assert report.due.in_line == (0 if backend.real else 1)
    assert worker_kind.drain(billing) == 1
    assert charged == [{"for": "billing"}]
    assert status(app, run.id) is RunStatus.SUCCEEDED


def test_the_same_wakeup_delivered_twice_runs_once(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    run = app.trigger(PLAIN, "once")
    assert app.publisher.publish_many([run]) == 1
    assert backend.depth(app) == 2

    assert worker_kind.drain(app, concurrency=2) == 1

    assert tasks.seen == [(PLAIN, run.id, 1, "once")]
    assert backend.depth(app) == 0
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


# --- drain ----------------------------------------------------------------------------


def test_drain_max_runs_counts_only_executed_runs(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    decoy = stored_unpublished(app, PLAIN)
    send_raw(backend, app, list(forged_bodies(decoy, app.config.environment).values()))
    runs = app.trigger_many(PLAIN, [{"n": n} for n in range(3)])
    real = {run.id for run in runs}

    assert worker_kind.drain(app, max_runs=2) == 2

    called = [run_id for _, run_id, _, _ in tasks.seen]
    assert len(called) == 2 and set(called) < real
    assert sorted(status(app, run_id).value for run_id in real) == [
        "queued",
        "succeeded",
        "succeeded",
    ]
    assert worker_kind.drain(app) == 1
    assert {run_id for _, run_id, _, _ in tasks.seen} == real
    assert backend.depth(app) == 0
    assert status(app, decoy) is RunStatus.QUEUED


def test_drain_stops_after_max_runs_and_leaves_the_rest_on_the_queue(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    runs = [app.trigger(PLAIN, n) for n in range(3)]

    assert worker_kind.drain(app, max_runs=1) == 1

    assert len(tasks.seen) == 1
    assert sorted(status(app, run.id).value for run in runs) == [
        "queued",
        "queued",
        "succeeded",
    ]
    assert backend.depth(app) == 2
    assert worker_kind.drain(app) == 2
    assert sorted(payload for _, _, _, payload in tasks.seen) == [0, 1, 2]
    assert backend.depth(app) == 0
