"""Retries: a failed attempt is recorded with its attempt number and its failure, and the
task's retry policy decides what follows: another attempt (at once, or after a backoff),
or a failed run once the attempts are used up or the exception is not retryable. Earlier
failures stay in the history when a later attempt succeeds.

Backoffs of any length work. A short one rides the wakeup's SQS delay; a long one is
kept as the run's due time in storage, sends nothing, and is published by maintenance
when due (SQS cannot delay a message more than 15 minutes).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, ManualClock, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.engine.reports import JOB_DUE
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import RETRY_AT_ONCE, SYNC_WORKER, event_types
from tests.emulators import count_requests, queue_counts, queue_url
from tests.workers import WorkerKind

SEND_OPERATIONS = ("SendMessage", "SendMessageBatch")

FLAKY = "retries.flaky"
FLAKY_ASYNC = "retries.flaky-async"
FATAL = "retries.fatal"
ODD = "retries.odd"
SOON = "retries.soon"
PATIENT = "retries.patient"
TWO_HOURS = timedelta(hours=2)


class Flaky(Exception):
    """Raised by the test handlers: retryable."""


class Invalid(Exception):
    """Raised by the test handlers: not retryable for ``FATAL``."""


def fail_until(ctx: TaskContext, payload: Any) -> Any:
    """Fail every attempt before ``payload["succeed_on"]`` (every one if it is None)."""
    succeed_on = payload["succeed_on"]
    if succeed_on is None or ctx.attempt < succeed_on:
        raise Flaky(f"attempt {ctx.attempt} failed")
    return {"attempt": ctx.attempt}


class Tasks:
    """This file's tasks; ``attempts`` records, per run, the attempts its handler saw."""

    def __init__(self) -> None:
        self.attempts: dict[str, list[int]] = {}

    def register(self, app: Runlane) -> None:
        app.task(self.flaky, name=FLAKY, retry=RETRY_AT_ONCE)
        app.task(self.flaky_async, name=FLAKY_ASYNC, retry=RETRY_AT_ONCE)
        app.task(
            self.fatal,
            name=FATAL,
            retry=RetryPolicy(max_attempts=5, delay=0, non_retryable=(Invalid,)),
        )
        app.task(self.odd, name=ODD, retry=RETRY_AT_ONCE)
        app.task(
            self.flaky, name=SOON, retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=90)
        )
        app.task(
            self.flaky,
            name=PATIENT,
            retry=RetryPolicy(
                max_attempts=3,
                backoff="exponential",
                delay=TWO_HOURS,
                max_delay=timedelta(days=1),
            ),
        )

    def _record(self, ctx: TaskContext) -> None:
        self.attempts.setdefault(ctx.run_id, []).append(ctx.attempt)

    def flaky(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx)
        return fail_until(ctx, payload)

    async def flaky_async(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx)
        return fail_until(ctx, payload)

    def fatal(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx)
        raise Invalid("bad input")

    def odd(self, ctx: TaskContext, payload: Any) -> Any:
        self._record(ctx)
        return {"at": object()}


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


@pytest.fixture
def emulator_app(make_app: Callable[..., Runlane], clock: ManualClock, tasks: Tasks) -> Runlane:
    app = make_app(clock=clock)
    tasks.register(app)
    app.provision()
    return app


def test_a_run_that_fails_twice_then_succeeds_keeps_its_failures_in_history(
    worker_kind: WorkerKind, app: Runlane, tasks: Tasks
) -> None:
    runs = [app.trigger(task, {"succeed_on": 3}) for task in (FLAKY, FLAKY_ASYNC)]

    assert worker_kind.drain(app, concurrency=2) == 6

    for run in runs:
        assert tasks.attempts[run.id] == [1, 2, 3]
        final = app.runs.get(run.id)
        assert (final.status, final.attempt, final.failures, final.result) == (
            RunStatus.SUCCEEDED,
            3,
            2,
            {"attempt": 3},
        )
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.ATTEMPT_FAILED,
            EventType.STARTED,
            EventType.ATTEMPT_FAILED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]
        failures = [e for e in app.runs.events(run.id) if e.type is EventType.ATTEMPT_FAILED]
        assert [(e.attempt, e.data["failure"]["message"]) for e in failures] == [
            (1, "attempt 1 failed"),
            (2, "attempt 2 failed"),
        ]
        assert all(e.data["failure"]["type"] == f"{__name__}.Flaky" for e in failures)


def test_exhausted_retries_fail_the_run_with_the_last_failure(app: Runlane, tasks: Tasks) -> None:
    run = app.trigger(FLAKY, {"succeed_on": None})

    assert SYNC_WORKER.drain(app) == 3
    assert SYNC_WORKER.drain(app) == 0

    assert tasks.attempts[run.id] == [1, 2, 3]
    final = app.runs.get(run.id)
    assert (final.status, final.attempt) == (RunStatus.FAILED, 3)
    assert final.failure is not None
    assert final.failure.type == f"{__name__}.Flaky"
    assert final.failure.message == "attempt 3 failed"
    assert "Flaky" in final.failure.traceback
    types = event_types(app, run.id)
    assert types.count(EventType.ATTEMPT_FAILED) == 3
    assert types[-2:] == [EventType.ATTEMPT_FAILED, EventType.FAILED]
    assert app.runs.events(run.id)[-1].data == {"attempts": 3}


def test_a_non_retryable_exception_fails_the_run_after_one_attempt(
    app: Runlane, tasks: Tasks
) -> None:
    run = app.trigger(FATAL, None)

    assert SYNC_WORKER.drain(app) == 1
    assert SYNC_WORKER.drain(app) == 0

    assert tasks.attempts[run.id] == [1]
    final = app.runs.get(run.id)
    assert (final.status, final.attempt) == (RunStatus.FAILED, 1)
    assert final.failure is not None
    assert final.failure.retryable is False
    assert final.failure.message == "bad input"
    assert event_types(app, run.id)[-2:] == [EventType.ATTEMPT_FAILED, EventType.FAILED]


def test_a_result_that_is_not_json_fails_the_run_without_retry(app: Runlane, tasks: Tasks) -> None:
    run = app.trigger(ODD, None)

    assert SYNC_WORKER.drain(app) == 1
    assert SYNC_WORKER.drain(app) == 0

    assert tasks.attempts[run.id] == [1]
    final = app.runs.get(run.id)
    assert (final.status, final.result) == (RunStatus.FAILED, None)
    assert final.failure is not None
    assert final.failure.retryable is False
    assert "handler result is not JSON-serialisable" in final.failure.message
    assert final.failure.type.endswith("InvalidPayloadError")


@ONLY_MEMORY
def test_a_short_backoff_runs_the_retry_when_it_is_due(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    """Memory only: the retry's wakeup rides an SQS delay, which on the emulators passes
    in real time, not with the test's clock (the emulator test below checks the delay)."""
    run = app.trigger(SOON, {"succeed_on": 2})

    assert SYNC_WORKER.drain(app) == 1
    retrying = app.runs.get(run.id)
    assert retrying.status is RunStatus.RETRYING
    assert retrying.due_at == backend.clock.now() + timedelta(seconds=90)

    backend.clock.advance(89)
    assert SYNC_WORKER.drain(app) == 0
    assert tasks.attempts[run.id] == [1]
    backend.clock.advance(1)
    assert SYNC_WORKER.drain(app) == 1
    assert tasks.attempts[run.id] == [1, 2]
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_a_short_backoff_is_published_with_a_matching_sqs_delay(
    emulator_app: Runlane, clock: ManualClock, sqs: Any
) -> None:
    """Under SQS's 15-minute limit the retry wakeup rides DelaySeconds, and the run is
    still only claimed once it is due in DynamoDB."""
    app = emulator_app
    run = app.trigger(SOON, {"succeed_on": 2})
    delays: list[int] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        delays.append(int(params.get("DelaySeconds", 0)))

    app.client("sqs").meta.events.register("provide-client-params.sqs.SendMessage", capture)

    assert SYNC_WORKER.drain(app) == 1

    assert delays == [90]
    assert queue_counts(sqs, queue_url(sqs, app))["delayed"] == 1
    assert app.runs.get(run.id).due_at == clock.now() + timedelta(seconds=90)


def test_a_long_backoff_is_kept_in_storage_and_published_by_maintenance_when_due(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    run = app.trigger(PATIENT, {"succeed_on": None})

    assert SYNC_WORKER.drain(app) == 1

    failed_at = backend.clock.now()
    retrying = app.runs.get(run.id)
    assert (retrying.status, retrying.attempt) == (RunStatus.RETRYING, 1)
    assert retrying.due_at == failed_at + TWO_HOURS
    assert backend.depth(app) == 0  # no wakeup sent, not even a delayed one

    # An early wakeup (duplicate, or a too-eager republisher) is deleted: not due yet.
    assert app.publisher.publish_many([retrying]) == 1
    assert SYNC_WORKER.drain(app) == 0
    assert app.runs.get(run.id).attempt == 1
    assert backend.depth(app) == 0

    # Maintenance publishes nothing before the retry is due, and the wakeup once it is;
    # attempt 2 then runs, and the next exponential backoff (four hours) is kept too.
    backend.clock.advance(TWO_HOURS - timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 0
    assert backend.depth(app) == 0
    backend.clock.advance(timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert backend.depth(app) == 1
    assert SYNC_WORKER.drain(app) == 1
    second = app.runs.get(run.id)
    assert (second.status, second.attempt) == (RunStatus.RETRYING, 2)
    assert second.due_at == backend.clock.now() + timedelta(hours=4)
    assert backend.depth(app) == 0
    assert tasks.attempts[run.id] == [1, 2]


def test_a_long_backoff_is_the_run_items_due_time_and_sends_no_message(
    emulator_app: Runlane, clock: ManualClock, dynamodb: Any
) -> None:
    app = emulator_app
    run = app.trigger(PATIENT, {"succeed_on": None})
    sent = count_requests(app.client("sqs"))

    assert SYNC_WORKER.drain(app) == 1

    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run.id),
        ConsistentRead=True,
    )["Item"]
    assert int(item["due_at"]["N"]) == to_epoch_ms(clock.now() + TWO_HOURS)
    assert sum(sent[op] for op in SEND_OPERATIONS) == 0

    clock.advance(TWO_HOURS - timedelta(seconds=1))
    app.maintenance.run_pass()
    assert sum(sent[op] for op in SEND_OPERATIONS) == 0
    clock.advance(timedelta(seconds=1))
    app.maintenance.run_pass()
    assert sum(sent[op] for op in SEND_OPERATIONS) == 1
