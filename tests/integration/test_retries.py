"""Retries on DynamoDB and SQS (semantics 5): attempts, history, and long backoffs that
live in DynamoDB rather than in SQS ``DelaySeconds``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, ManualClock, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core.durations import to_epoch_ms
from tests.integration.conftest import count_requests, queue_counts, queue_url

SEND_OPERATIONS = ("SendMessage", "SendMessageBatch")


class Flaky(Exception):
    """Raised by the test handlers."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _failing_until(succeed_on: int | None) -> Callable[[TaskContext, Any], Any]:
    def handler(ctx: TaskContext, payload: Any) -> Any:
        if succeed_on is None or ctx.attempt < succeed_on:
            raise Flaky(f"attempt {ctx.attempt} failed")
        return {"attempt": ctx.attempt}

    return handler


def test_a_run_that_fails_twice_then_succeeds_keeps_its_failures_in_history(
    make_app: Callable[..., Runlane], clock: ManualClock
) -> None:
    app = make_app(clock=clock)
    app.task(
        _failing_until(3),
        name="retries.flaky",
        retry=RetryPolicy(max_attempts=3, backoff="fixed", delay=0),
    )
    app.provision()
    run = app.trigger("retries.flaky", {"order": 7})

    assert app.worker().drain() == 3

    final = app.runs.get(run.id)
    assert (final.status, final.attempt, final.result) == (RunStatus.SUCCEEDED, 3, {"attempt": 3})
    events = app.runs.events(run.id)
    assert [e.type for e in events] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.ATTEMPT_FAILED,
        EventType.STARTED,
        EventType.ATTEMPT_FAILED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert [e.seq for e in events] == list(range(1, 8))
    failures = [e for e in events if e.type is EventType.ATTEMPT_FAILED]
    assert [(e.attempt, e.data["failure"]["message"]) for e in failures] == [
        (1, "attempt 1 failed"),
        (2, "attempt 2 failed"),
    ]
    assert all(e.data["failure"]["type"].endswith("Flaky") for e in failures)


def test_exhausted_retries_fail_the_run_with_the_last_failure(
    make_app: Callable[..., Runlane], clock: ManualClock
) -> None:
    app = make_app(clock=clock)
    app.task(
        _failing_until(None),
        name="retries.hopeless",
        retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=0),
    )
    app.provision()
    run = app.trigger("retries.hopeless", None)

    assert app.worker().drain() == 2

    final = app.runs.get(run.id)
    assert (final.status, final.attempt) == (RunStatus.FAILED, 2)
    assert final.failure is not None
    assert final.failure.type == f"{Flaky.__module__}.{Flaky.__qualname__}"
    assert final.failure.message == "attempt 2 failed"
    assert "Flaky" in final.failure.traceback
    events = app.runs.events(run.id)
    assert [e.type for e in events][-2:] == [EventType.ATTEMPT_FAILED, EventType.FAILED]
    assert [e.type for e in events].count(EventType.ATTEMPT_FAILED) == 2
    assert events[-1].data == {"attempts": 2}


def test_a_non_retryable_failure_fails_the_run_after_one_attempt(
    make_app: Callable[..., Runlane], clock: ManualClock
) -> None:
    app = make_app(clock=clock)
    app.task(
        _failing_until(None),
        name="retries.fatal",
        retry=RetryPolicy(max_attempts=5, backoff="fixed", delay=0, non_retryable=(Flaky,)),
    )
    app.provision()
    run = app.trigger("retries.fatal", None)

    assert app.worker().drain() == 1

    final = app.runs.get(run.id)
    assert (final.status, final.attempt) == (RunStatus.FAILED, 1)
    assert final.failure is not None and final.failure.retryable is False


def test_a_two_hour_backoff_is_stored_in_dynamodb_not_delayed_in_sqs(
    make_app: Callable[..., Runlane], clock: ManualClock, sqs: Any, dynamodb: Any
) -> None:
    app = make_app(clock=clock)
    app.task(
        _failing_until(None),
        name="retries.patient",
        retry=RetryPolicy(
            max_attempts=3,
            backoff="exponential",
            delay=timedelta(hours=2),
            max_delay=timedelta(days=1),
        ),
    )
    app.provision()
    url = queue_url(sqs, app)
    run = app.trigger("retries.patient", None)
    sent = count_requests(app.client("sqs"))

    assert app.worker().drain() == 1

    failed_at = clock.now()
    retrying = app.runs.get(run.id)
    assert (retrying.status, retrying.attempt) == (RunStatus.RETRYING, 1)
    assert retrying.due_at == failed_at + timedelta(hours=2)
    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run.id),
        ConsistentRead=True,
    )["Item"]
    assert int(item["due_at"]["N"]) == to_epoch_ms(failed_at + timedelta(hours=2))
    assert sum(sent[op] for op in SEND_OPERATIONS) == 0
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}

    # An early wakeup (duplicate, or a too-eager republisher) is deleted: not due yet.
    app.publish(retrying)
    assert app.worker().drain() == 0
    assert app.runs.get(run.id).attempt == 1
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}

    # Maintenance publishes nothing before the retry is due, and the wakeup once it is;
    # attempt 2 then runs, and the next exponential backoff (four hours) is stored too.
    sent.clear()
    clock.advance(timedelta(hours=2) - timedelta(seconds=1))
    app.maintenance.run_pass()
    assert sum(sent[op] for op in SEND_OPERATIONS) == 0
    clock.advance(timedelta(seconds=1))
    app.maintenance.run_pass()
    assert sum(sent[op] for op in SEND_OPERATIONS) == 1
    sent.clear()
    assert app.worker().drain() == 1
    second = app.runs.get(run.id)
    assert (second.status, second.attempt) == (RunStatus.RETRYING, 2)
    assert second.due_at == clock.now() + timedelta(hours=4)
    assert sum(sent[op] for op in SEND_OPERATIONS) == 0
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_a_short_backoff_is_published_with_a_matching_sqs_delay(
    make_app: Callable[..., Runlane], clock: ManualClock, sqs: Any
) -> None:
    """Under SQS's 15-minute limit the retry wakeup rides DelaySeconds, and the run is
    still only claimed once it is due in DynamoDB."""
    app = make_app(clock=clock)
    app.task(
        _failing_until(2),
        name="retries.soon",
        retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=timedelta(seconds=90)),
    )
    app.provision()
    url = queue_url(sqs, app)
    run = app.trigger("retries.soon", None)
    delays: list[int] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        delays.append(int(params.get("DelaySeconds", 0)))

    app.client("sqs").meta.events.register("provide-client-params.sqs.SendMessage", capture)

    assert app.worker().drain() == 1

    assert delays == [90]
    assert queue_counts(sqs, url)["delayed"] == 1
    assert app.runs.get(run.id).due_at == clock.now() + timedelta(seconds=90)
