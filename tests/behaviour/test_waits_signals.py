"""Signals, on every backend, with time moved by hand.

A signal wakes the runs waiting on its key when it is sent, and each woken run's next
attempt sees the signal's payload at the same wait. It is not stored for later: a run
that starts waiting after the signal was sent keeps waiting for the next one. A signal
wait with a timeout is ended by maintenance once the timeout passes, unless a signal
came first.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    InvalidKeyError,
    InvalidPayloadError,
    ManualClock,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.engine.reports import JOB_DUE
from tests.backends import Backend
from tests.behaviour.waits_support import drain_all, published
from tests.behaviour.worker_support import drain, event_types, status


class Handlers:
    """The tasks of this file; the signal waiter notes what it received."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        """(run id, signal payload) for each signal a handler received."""

    def signal_waiter(self, ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal(payload["key"])
        self.seen.append((ctx.run_id, result.payload))
        return {"status": result.status, "payload": result.payload}

    def two_step(self, ctx: TaskContext, payload: Any) -> Any:
        first = ctx.wait_for_signal("stage")
        second = ctx.wait_for_signal("stage")
        return [first.payload, second.payload]

    def impatient(self, ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal("never", timeout=timedelta(minutes=30))
        return {"status": result.status, "received": result.received, "payload": result.payload}

    def in_time(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal("soon", timeout=timedelta(minutes=30)).status


def register(app: Runlane, handlers: Handlers) -> None:
    app.task(handlers.signal_waiter, name="signal-waiter")
    app.task(handlers.two_step, name="two-step")
    app.task(handlers.impatient, name="impatient")
    app.task(handlers.in_time, name="in-time")


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(backend: Backend, handlers: Handlers) -> Runlane:
    return backend.app(register=partial(register, handlers=handlers))


def test_a_signal_sent_before_anyone_waits_is_not_kept_for_a_later_waiter(
    app: Runlane, clock: ManualClock, handlers: Handlers
) -> None:
    assert app.signals.send("early", {"n": 1}) == 0

    run = app.trigger("signal-waiter", {"key": "early"})
    assert drain(app) == 1
    assert status(app, run.id) is RunStatus.RELEASED
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        app.maintenance.run_pass()
        assert drain(app) == 0
    assert status(app, run.id) is RunStatus.RELEASED
    assert handlers.seen == []

    assert app.signals.send("early", {"n": 2}) == 1
    assert drain(app) == 1
    assert handlers.seen == [(run.id, {"n": 2})]


def test_a_signal_wakes_every_current_waiter_with_its_payload(
    app: Runlane, handlers: Handlers
) -> None:
    runs = app.trigger_many("signal-waiter", [{"key": "go"}] * 3)
    bystander = app.trigger("signal-waiter", {"key": "other"})
    assert drain(app, concurrency=4) == 4
    assert {status(app, r.id) for r in runs} == {RunStatus.RELEASED}

    assert app.signals.send("go", {"approved": True}) == 3
    assert {status(app, r.id) for r in runs} == {RunStatus.QUEUED}
    assert drain(app, concurrency=3) == 3
    assert sorted(handlers.seen) == sorted((r.id, {"approved": True}) for r in runs)
    for run in runs:
        done = app.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED
        assert done.result == {"status": "received", "payload": {"approved": True}}
        assert event_types(app, run.id).count(EventType.SIGNAL_RECEIVED) == 1
        received = next(e for e in app.runs.events(run.id) if e.type is EventType.SIGNAL_RECEIVED)
        assert received.data == {"key": "go"}
    assert status(app, bystander.id) is RunStatus.RELEASED
    assert app.signals.send("go", "again") == 0


def test_a_run_that_starts_waiting_after_the_signal_keeps_waiting(
    app: Runlane, clock: ManualClock, handlers: Handlers
) -> None:
    first = app.trigger("signal-waiter", {"key": "k"})
    assert drain(app) == 1
    assert app.signals.send("k", "first") == 1
    late = app.trigger("signal-waiter", {"key": "k"})
    assert drain_all(app) == 2
    assert status(app, first.id) is RunStatus.SUCCEEDED
    assert status(app, late.id) is RunStatus.RELEASED
    clock.advance(timedelta(days=1))
    app.maintenance.run_pass()
    assert drain(app) == 0
    assert handlers.seen == [(first.id, "first")]
    assert app.signals.send("k", "second") == 1
    assert drain(app) == 1
    assert app.runs.get(late.id).result == {"status": "received", "payload": "second"}


def test_a_signal_key_with_brackets_wakes_its_waiter(app: Runlane) -> None:
    """Signal keys may hold any printable character; the woken run's result is written
    into the ``wait_results`` map under the wait's name, which contains the key."""
    run = app.trigger("signal-waiter", {"key": "orders[7]"})
    assert drain(app) == 1
    assert app.signals.send("orders[7]", "shipped") == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"status": "received", "payload": "shipped"}


def test_two_waits_on_the_same_key_are_told_apart(app: Runlane) -> None:
    run = app.trigger("two-step")
    assert drain(app) == 1
    assert app.signals.send("stage", "one") == 1
    assert drain(app) == 1
    assert status(app, run.id) is RunStatus.RELEASED
    assert app.signals.send("stage", "two") == 1
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.result == ["one", "two"]
    assert (done.attempt, done.failures) == (3, 0)


def test_a_signal_wait_times_out_after_its_timeout_through_a_pass(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger("impatient")
    assert drain(app) == 1
    waiting = app.runs.get(run.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.due_at == clock.now() + timedelta(minutes=30)

    clock.advance(timedelta(minutes=29))
    assert published(app.maintenance.run_pass()) == 0
    assert drain(app) == 0
    clock.advance(timedelta(minutes=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"status": "timed_out", "received": False, "payload": None}
    assert list(done.wait_results.values()) == [{"status": "timed_out"}]
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.RELEASED,
        EventType.WAIT_TIMED_OUT,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert app.signals.send("never", 1) == 0


def test_a_signal_before_the_timeout_wins_over_it(app: Runlane, clock: ManualClock) -> None:
    run = app.trigger("in-time")
    assert drain(app) == 1
    clock.advance(timedelta(minutes=10))
    assert app.signals.send("soon") == 1
    clock.advance(timedelta(hours=1))
    app.maintenance.run_pass()
    assert drain_all(app) == 1
    assert app.runs.get(run.id).result == "received"
    assert EventType.WAIT_TIMED_OUT not in event_types(app, run.id)


def test_a_signal_needs_a_json_payload_and_a_key(app: Runlane) -> None:
    with pytest.raises(InvalidPayloadError):
        app.signals.send("key", float("nan"))
    with pytest.raises(InvalidKeyError):
        app.signals.send("  ")
