"""The whole app over the in-memory store and transport, with time moved by hand."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    InvalidKeyError,
    InvalidPayloadError,
    PayloadTooLarge,
    RetryPolicy,
    Runlane,
    RunStatus,
    TaskContext,
    UnknownTaskError,
)
from runlane_sqs.adapters.memory.store import InMemoryRunStore
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core import machine
from runlane_sqs.core.names import new_run_id
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.testing import ManualClock, in_memory_app

RETRY_AT_ONCE = RetryPolicy(max_attempts=3, delay=0, backoff="fixed")


class Flaky(Exception):
    pass


class Invalid(Exception):
    pass


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    return in_memory_app(clock=clock)


def store(app: Runlane) -> InMemoryRunStore:
    assert isinstance(app.store, InMemoryRunStore)
    return app.store


def transport(app: Runlane) -> InMemoryTransport:
    assert isinstance(app.transport, InMemoryTransport)
    return app.transport


def drain(app: Runlane, max_runs: int | None = None) -> int:
    return app.worker().drain(max_runs=max_runs)


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def calls_recorder(app: Runlane, name: str = "work", **options: Any) -> list[Any]:
    """Register a task that records each payload it gets and succeeds."""
    calls: list[Any] = []

    @app.task(name=name, **options)
    def work(ctx: TaskContext, payload: Any) -> Any:
        calls.append(payload)
        return {"echo": payload}

    return calls


def failing_times(
    app: Runlane, failures: int, retry: RetryPolicy, exc: Callable[[], Exception] = Flaky
) -> list[int]:
    """Register a task that fails its first ``failures`` attempts; returns seen attempts."""
    attempts: list[int] = []

    @app.task(name="flaky", retry=retry)
    def flaky(ctx: TaskContext, payload: Any) -> str:
        attempts.append(ctx.attempt)
        if len(attempts) <= failures:
            raise exc()
        return "finally"

    return attempts


# the happy path ----------------------------------------------------------------------


def test_trigger_and_drain_succeeds(app: Runlane) -> None:
    seen: list[tuple[str, int, Any]] = []

    @app.task(name="send")
    def send(ctx: TaskContext, payload: Any) -> dict[str, Any]:
        seen.append((ctx.run_id, ctx.attempt, payload))
        assert isinstance(ctx.cancellation, threading.Event)
        assert not ctx.cancelled
        return {"sent_to": payload["to"]}

    run = app.trigger("send", {"to": "a@example.com"})
    assert run.created is True
    assert run.status is RunStatus.QUEUED
    assert drain(app) == 1
    assert seen == [(run.id, 1, {"to": "a@example.com"})]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.SUCCEEDED
    assert stored.result == {"sent_to": "a@example.com"}
    assert stored.attempt == 1
    assert stored.lease is None
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert transport(app).depth("default") == 0
    assert drain(app) == 0


def test_a_task_object_triggers_like_its_name(app: Runlane) -> None:
    calls: list[Any] = []

    @app.task(name="ping")
    def ping(ctx: TaskContext, payload: Any) -> None:
        calls.append(payload)

    app.trigger(ping, 1)
    app.trigger("ping", 2)
    assert drain(app) == 2
    assert sorted(calls) == [1, 2]


# retries -----------------------------------------------------------------------------


def test_fail_twice_then_succeed_keeps_the_failures_in_history(app: Runlane) -> None:
    attempts = failing_times(app, 2, RETRY_AT_ONCE)
    run = app.trigger("flaky")
    for _ in range(3):
        drain(app)
    assert attempts == [1, 2, 3]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.SUCCEEDED
    assert stored.attempt == 3
    assert stored.result == "finally"
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
    assert [e.attempt for e in failures] == [1, 2]
    assert all(e.data["failure"]["type"] == f"{__name__}.Flaky" for e in failures)


def test_a_retry_with_backoff_waits_for_its_due_time(app: Runlane, clock: ManualClock) -> None:
    attempts = failing_times(app, 1, RetryPolicy(max_attempts=2, delay=30, backoff="fixed"))
    run = app.trigger("flaky")
    assert drain(app) == 1
    retrying = app.runs.get(run.id)
    assert retrying.status is RunStatus.RETRYING
    assert retrying.due_at == clock.now() + timedelta(seconds=30)
    clock.advance(29)
    assert drain(app) == 0
    assert attempts == [1]
    clock.advance(1)
    assert drain(app) == 1
    assert attempts == [1, 2]
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_exhausted_retries_fail_the_run(app: Runlane) -> None:
    attempts = failing_times(app, 99, RETRY_AT_ONCE)
    run = app.trigger("flaky")
    for _ in range(4):
        drain(app)
    assert attempts == [1, 2, 3]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    assert stored.attempt == 3
    assert stored.failure is not None
    assert stored.failure.type == f"{__name__}.Flaky"
    assert "Flaky" in stored.failure.traceback
    types = event_types(app, run.id)
    assert types.count(EventType.ATTEMPT_FAILED) == 3
    assert types[-1] is EventType.FAILED
    assert app.runs.events(run.id)[-1].data == {"attempts": 3}


def test_a_non_retryable_exception_fails_at_once(app: Runlane) -> None:
    policy = RetryPolicy(max_attempts=5, delay=0, non_retryable=(Invalid,))
    attempts = failing_times(app, 99, policy, exc=lambda: Invalid("bad input"))
    run = app.trigger("flaky")
    assert drain(app) == 1
    assert drain(app) == 0
    assert attempts == [1]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    assert stored.failure is not None
    assert stored.failure.retryable is False
    assert stored.failure.message == "bad input"
    assert event_types(app, run.id)[-2:] == [EventType.ATTEMPT_FAILED, EventType.FAILED]


def test_a_result_that_is_not_json_fails_the_run_without_retry(app: Runlane) -> None:
    calls: list[int] = []

    @app.task(name="odd", retry=RETRY_AT_ONCE)
    def odd(ctx: TaskContext, payload: Any) -> object:
        calls.append(ctx.attempt)
        return {"at": object()}

    run = app.trigger("odd")
    drain(app)
    drain(app)
    assert calls == [1]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    assert stored.result is None
    assert stored.failure is not None
    assert stored.failure.retryable is False
    assert "handler result is not JSON-serialisable" in stored.failure.message
    assert stored.failure.type.endswith("InvalidPayloadError")


# bad input at trigger: nothing written ------------------------------------------------


def assert_nothing_written(app: Runlane) -> None:
    assert store(app).all_runs() == []
    assert transport(app).depth("default") == 0


def test_an_unknown_task_is_refused(app: Runlane) -> None:
    calls_recorder(app)
    with pytest.raises(UnknownTaskError, match="nope"):
        app.trigger("nope", {})
    assert_nothing_written(app)


@pytest.mark.parametrize(
    "payload",
    [object(), {"when": timedelta(1)}, {"n": float("nan")}, {"s": {1, 2}}, [b"bytes"]],
    ids=["object", "timedelta", "nan", "set", "bytes"],
)
def test_a_payload_that_is_not_json_is_refused(app: Runlane, payload: Any) -> None:
    calls_recorder(app)
    with pytest.raises(InvalidPayloadError):
        app.trigger("work", payload)
    assert_nothing_written(app)


def test_a_payload_over_the_limit_is_refused(clock: ManualClock) -> None:
    app = in_memory_app(clock=clock, payload_limit=100)
    calls_recorder(app)
    app.trigger("work", {"data": "x" * 80})  # 91 bytes of JSON: fits
    with pytest.raises(PayloadTooLarge) as refused:
        app.trigger("work", {"data": "x" * 90})
    assert refused.value.limit == 100
    assert refused.value.size == 101
    assert len(store(app).all_runs()) == 1


def test_a_payload_over_the_limit_writes_nothing(clock: ManualClock) -> None:
    app = in_memory_app(clock=clock, payload_limit=100)
    calls_recorder(app)
    with pytest.raises(PayloadTooLarge):
        app.trigger("work", {"data": "é" * 50})  # 50 characters, 100+ bytes
    assert_nothing_written(app)


BAD_KEYS = ["", "   ", " key", "key ", "k\x00ey", "k\ney", "k" * 257, 42]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_idempotency_key_is_refused(app: Runlane, key: Any) -> None:
    calls_recorder(app)
    with pytest.raises(InvalidKeyError):
        app.trigger("work", {}, idempotency_key=key)
    assert_nothing_written(app)


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_singleton_key_is_refused(app: Runlane, key: Any) -> None:
    calls_recorder(app)
    with pytest.raises(InvalidKeyError):
        app.trigger("work", {}, singleton_key=key)
    assert_nothing_written(app)


# idempotency and singleton keys -------------------------------------------------------


def test_a_duplicate_trigger_returns_the_same_run(app: Runlane) -> None:
    calls = calls_recorder(app)
    first = app.trigger("work", {"n": 1}, idempotency_key="order#42")
    again = app.trigger("work", {"n": 2}, idempotency_key="order#42")
    assert first.created is True
    assert again.created is False
    assert again.id == first.id
    assert again.payload == {"n": 1}
    assert len(store(app).all_runs()) == 1
    assert transport(app).depth("default") == 1  # the duplicate published nothing
    assert drain(app) == 1
    after = app.trigger("work", {"n": 3}, idempotency_key="order#42")
    assert (after.id, after.created, after.status) == (first.id, False, RunStatus.SUCCEEDED)
    assert drain(app) == 0
    assert calls == [{"n": 1}]


def test_idempotency_keys_are_scoped_by_task(app: Runlane) -> None:
    calls_recorder(app, "a")
    calls_recorder(app, "b")
    first = app.trigger("a", idempotency_key="k")
    other = app.trigger("b", idempotency_key="k")
    assert other.created is True
    assert other.id != first.id


def test_a_failed_owner_releases_its_idempotency_key(app: Runlane) -> None:
    failing_times(app, 1, RetryPolicy(max_attempts=1))
    first = app.trigger("flaky", idempotency_key="order-7")
    assert drain(app) == 1
    assert app.runs.get(first.id).status is RunStatus.FAILED
    second = app.trigger("flaky", idempotency_key="order-7")
    assert second.created is True
    assert second.id != first.id
    assert drain(app) == 1
    assert app.runs.get(second.id).status is RunStatus.SUCCEEDED
    assert app.trigger("flaky", idempotency_key="order-7").id == second.id


def test_singleton_allows_one_active_run_per_key(app: Runlane) -> None:
    calls = calls_recorder(app)
    first = app.trigger("work", 1, singleton_key="user-7")
    second = app.trigger("work", 2, singleton_key="user-7")
    assert (second.id, second.created) == (first.id, False)
    other_key = app.trigger("work", 3, singleton_key="user-8")
    assert other_key.created is True
    assert drain(app) == 2
    third = app.trigger("work", 4, singleton_key="user-7")
    assert third.created is True
    assert third.id != first.id
    assert drain(app) == 1
    assert sorted(calls) == [1, 3, 4]


# delays ------------------------------------------------------------------------------


def test_a_short_delay_runs_when_due(app: Runlane, clock: ManualClock) -> None:
    calls = calls_recorder(app)
    run = app.trigger("work", delay=600)
    assert app.runs.get(run.id).due_at == clock.now() + timedelta(seconds=600)
    assert drain(app) == 0
    clock.advance(599)
    assert drain(app) == 0
    clock.advance(1)
    assert drain(app) == 1
    assert calls == [None]


def test_a_long_delay_is_kept_in_storage_not_in_the_queue(app: Runlane, clock: ManualClock) -> None:
    calls = calls_recorder(app)
    start = clock.now()
    run = app.trigger("work", {"later": True}, delay=timedelta(hours=2))
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.due_at == start + timedelta(hours=2)
    assert app.runs.events(run.id)[0].data == {"due_at": stored.due_at.isoformat()}
    assert drain(app) == 0
    clock.advance(timedelta(hours=2))
    assert drain(app) == 0  # no wakeup yet: maintenance publishes it when due
    assert calls == []
    assert app.runs.get(run.id).status is RunStatus.QUEUED
    assert app.runs.get(run.id).due_at == start + timedelta(hours=2)


def test_a_long_delay_runs_once_maintenance_publishes_it(app: Runlane, clock: ManualClock) -> None:
    calls = calls_recorder(app)
    app.trigger("work", delay=timedelta(days=3))
    clock.advance(timedelta(days=3) - timedelta(seconds=1))
    app.maintenance.run_pass()
    assert drain(app) == 0
    clock.advance(1)
    app.maintenance.run_pass()
    assert drain(app) == 1
    assert calls == [None]


# drain -------------------------------------------------------------------------------


def test_drain_counts_only_executed_runs(app: Runlane) -> None:
    calls_recorder(app)
    for _ in range(3):
        transport(app).send_raw("default", "garbage")
    app.trigger("work", 1)
    app.trigger("work", 2)
    assert drain(app) == 2
    assert transport(app).depth("default") == 0


def test_skipped_wakeups_do_not_use_up_max_runs(app: Runlane) -> None:
    calls = calls_recorder(app)
    for _ in range(3):
        transport(app).send_raw("default", "garbage")
    app.trigger("work", 1)
    app.trigger("work", 2)
    assert drain(app, max_runs=2) == 2
    assert sorted(calls) == [1, 2]


def test_drain_stops_after_max_runs_and_leaves_the_rest(app: Runlane) -> None:
    calls = calls_recorder(app)
    runs = [app.trigger("work", n) for n in range(3)]
    assert drain(app, max_runs=1) == 1
    assert len(calls) == 1
    statuses = sorted(app.runs.get(r.id).status.value for r in runs)
    assert statuses == ["queued", "queued", "succeeded"]
    assert transport(app).depth("default") == 2
    assert drain(app) == 2
    assert sorted(calls) == [0, 1, 2]


def wakeup_body(app: Runlane, run_id: str, environment: str | None = None) -> str:
    return Wakeup(
        environment=environment or app.config.environment,
        run_id=run_id,
        queue="default",
        requested_at=app.clock.now(),
    ).to_json()


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


@pytest.mark.parametrize(
    "body",
    [
        "garbage",
        "",
        "{}",
        "[]",
        '{"version": 2}',
        "x" * 5000,
        '{"version":1,"environment":"test","run_id":"nothex","queue":"default",'
        '"requested_at":"2030-01-01T00:00:00+00:00"}',
    ],
    ids=["garbage", "empty", "empty-object", "list", "version-2", "oversized", "bad-run-id"],
)
def test_a_malformed_wakeup_is_deleted_and_runs_nothing(app: Runlane, body: str) -> None:
    calls = calls_recorder(app)
    transport(app).send_raw("default", body)
    assert drain(app) == 0
    assert transport(app).depth("default") == 0
    assert calls == []


def test_a_deeply_nested_wakeup_is_deleted_and_runs_nothing(app: Runlane) -> None:
    calls = calls_recorder(app)
    transport(app).send_raw("default", "[" * 2000 + "]" * 2000)
    assert drain(app) == 0
    assert transport(app).depth("default") == 0
    assert calls == []


def test_a_foreign_environment_wakeup_is_deleted_and_runs_nothing(app: Runlane) -> None:
    calls = calls_recorder(app)
    run_id = stored_unpublished(app, "work")
    transport(app).send_raw("default", wakeup_body(app, run_id, environment="other"))
    assert drain(app) == 0
    assert transport(app).depth("default") == 0
    assert calls == []
    assert app.runs.get(run_id).status is RunStatus.QUEUED
    # the same run named in the right environment does run
    transport(app).send_raw("default", wakeup_body(app, run_id))
    assert drain(app) == 1
    assert calls == [{"direct": True}]


def test_a_wakeup_for_an_unknown_run_is_deleted(app: Runlane) -> None:
    calls = calls_recorder(app)
    transport(app).send_raw("default", wakeup_body(app, new_run_id()))
    assert drain(app) == 0
    assert transport(app).depth("default") == 0
    assert calls == []


def test_a_wakeup_for_a_task_this_app_lacks_is_left_for_another_worker(
    app: Runlane, clock: ManualClock
) -> None:
    calls_recorder(app)
    run_id = stored_unpublished(app, "billing.charge")
    transport(app).send_raw("default", wakeup_body(app, run_id))
    assert drain(app) == 0
    assert transport(app).depth("default") == 1
    stored = app.runs.get(run_id)
    assert (stored.status, stored.attempt) == (RunStatus.QUEUED, 0)
    # a worker of an app that registers the task gets it once the message is visible again
    other = Runlane(
        environment=app.config.environment, clock=clock, store=app.store, transport=app.transport
    )
    charged: list[Any] = []
    other.task(name="billing.charge")(lambda ctx, payload: charged.append(payload))
    clock.advance(61)
    assert drain(other) == 1
    assert charged == [{"direct": True}]
    assert app.runs.get(run_id).status is RunStatus.SUCCEEDED


def test_a_duplicate_wakeup_after_success_is_ignored(app: Runlane) -> None:
    calls = calls_recorder(app)
    run = app.trigger("work", "once")
    assert drain(app) == 1
    app.publish(run)
    transport(app).send_raw("default", wakeup_body(app, run.id))
    assert transport(app).depth("default") == 2
    assert drain(app) == 0
    assert calls == ["once"]
    assert transport(app).depth("default") == 0
    assert event_types(app, run.id)[-1] is EventType.SUCCEEDED


def test_the_same_wakeup_delivered_twice_runs_once(app: Runlane) -> None:
    calls = calls_recorder(app)
    run = app.trigger("work", "once")
    app.publish(run)
    assert drain(app) == 1
    assert calls == ["once"]


def test_the_handler_sees_the_payload_as_stored_json(app: Runlane) -> None:
    # In production the payload is read back from its JSON; the in-memory app must agree.
    seen: list[Any] = []
    app.task(name="look")(lambda ctx, payload: seen.append(payload))
    payload: dict[Any, Any] = {"ids": (1, 2), 3: "three"}
    app.trigger("look", payload)
    payload["ids"] = "changed after trigger"
    drain(app)
    assert seen == [{"ids": [1, 2], "3": "three"}]


# shutdown ----------------------------------------------------------------------------


def test_stop_sets_the_cancellation_of_in_flight_attempts(app: Runlane) -> None:
    started = threading.Event()
    seen: dict[str, Any] = {}

    @app.task(name="long")
    def long(ctx: TaskContext, payload: Any) -> str:
        seen["run_id"], seen["attempt"] = ctx.run_id, ctx.attempt
        seen["cancelled_at_start"] = ctx.cancelled
        started.set()
        seen["cancelled"] = ctx.cancellation.wait(timeout=10)
        return "stopped early"

    run = app.trigger("long")
    worker = app.worker()
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        assert started.wait(timeout=10)
        worker.stop()
    finally:
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert seen == {
        "run_id": run.id,
        "attempt": 1,
        "cancelled_at_start": False,
        "cancelled": True,
    }
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
