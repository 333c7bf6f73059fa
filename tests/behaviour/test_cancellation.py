"""Cancelling runs on DynamoDB and SQS, with a real worker in a background thread.

A running run becomes ``cancel_requested``; the worker's heartbeat (every second, with
a three-second lease) sets the handler's cancellation event, and the outcome it then
records is ``cancelled``. A waiting run is cancelled at once and never executes. A
finished run cannot be cancelled, and an unknown one is not found.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    IllegalTransition,
    Runlane,
    RunNotFound,
    RunStatus,
    TaskContext,
    Worker,
)
from runlane_sqs.core.model import new_run_id
from tests.behaviour.worker_support import status
from tests.emulators import queue_counts, queue_url, wait_until

WAITING_TASK = "cancel.waiting"
QUICK_TASK = "cancel.quick"
LEASE_SECONDS = 3
"""The shortest lease allowed: the worker's heartbeat beats every second."""
HANDLER_WAIT_SECONDS = 20.0
TIMEOUT_SECONDS = 15.0


class Handlers:
    """Task handlers that record what they saw."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = threading.Event()
        self.observed: dict[str, Any] = {}

    def waiting(self, ctx: TaskContext, payload: Any) -> dict[str, Any]:
        """Wait for cancellation (at most ``HANDLER_WAIT_SECONDS``), then return."""
        self.calls.append(ctx.run_id)
        self.started.set()
        began = time.monotonic()
        fired = ctx.cancellation.wait(timeout=HANDLER_WAIT_SECONDS)
        self.observed.update(fired=fired, cancelled=ctx.cancelled, waited=time.monotonic() - began)
        return {"fired": fired}

    def quick(self, ctx: TaskContext, payload: Any) -> Any:
        self.calls.append(ctx.run_id)
        return payload


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(make_app: Callable[..., Runlane], handlers: Handlers) -> Runlane:
    app = make_app(lease_duration=LEASE_SECONDS)
    app.task(name=WAITING_TASK)(handlers.waiting)
    app.task(name=QUICK_TASK)(handlers.quick)
    app.provision()
    return app


@contextmanager
def running_worker(app: Runlane) -> Iterator[Worker]:
    """``worker.run()`` in a background thread, stopped (and joined) on exit."""
    worker = app.worker(concurrency=2, wait_seconds=1)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=TIMEOUT_SECONDS)
    assert not thread.is_alive(), "the worker did not stop"
    assert errors == []


def test_cancelling_a_running_run_stops_its_handler_and_ends_it_cancelled(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger(WAITING_TASK, {"job": 1})
    with running_worker(app):
        wait_until(
            lambda: status(app, run.id) is RunStatus.RUNNING, TIMEOUT_SECONDS, "the run to start"
        )
        assert handlers.started.wait(TIMEOUT_SECONDS)

        asked = app.runs.cancel(run.id, reason="user asked", actor="alice")

        assert asked.status is RunStatus.CANCEL_REQUESTED
        wait_until(
            lambda: status(app, run.id) is RunStatus.CANCELLED,
            TIMEOUT_SECONDS,
            "the run to end cancelled",
        )

    assert handlers.observed["fired"] is True
    assert handlers.observed["cancelled"] is True
    assert handlers.observed["waited"] < HANDLER_WAIT_SECONDS
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
    assert handlers.calls == [run.id]


def test_cancelling_a_queued_run_cancels_it_at_once_and_it_never_runs(
    app: Runlane, handlers: Handlers, sqs: Any
) -> None:
    run = app.trigger(QUICK_TASK, {"job": 2}, delay=1)
    assert run.due_at is not None

    cancelled = app.runs.cancel(run.id, reason="not needed", actor="bob")

    assert cancelled.status is RunStatus.CANCELLED
    assert status(app, run.id) is RunStatus.CANCELLED
    url = queue_url(sqs, app)
    wait_until(
        lambda: queue_counts(sqs, url)["visible"] == 1,
        TIMEOUT_SECONDS,
        "the delayed wakeup to become visible",
    )
    assert app.clock.now() >= run.due_at

    assert app.worker(wait_seconds=1).drain() == 0

    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert handlers.calls == []
    final = app.runs.get(run.id)
    assert (final.status, final.attempt, final.lease) == (RunStatus.CANCELLED, 0, None)
    events = app.runs.events(run.id)
    assert [e.type for e in events] == [EventType.TRIGGERED, EventType.CANCELLED]
    assert events[1].data == {"actor": "bob", "reason": "not needed"}


def test_cancelling_a_succeeded_run_is_illegal_and_it_stays_succeeded(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger(QUICK_TASK, {"job": 3})
    assert app.worker(wait_seconds=1).drain() == 1
    assert status(app, run.id) is RunStatus.SUCCEEDED

    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id, reason="too late", actor="alice")

    final = app.runs.get(run.id)
    assert (final.status, final.result) == (RunStatus.SUCCEEDED, {"job": 3})
    assert [e.type for e in app.runs.events(run.id)] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert handlers.calls == [run.id]


def test_cancelling_an_unknown_run_is_not_found(app: Runlane) -> None:
    app.trigger(QUICK_TASK, {"job": 4})
    unknown = new_run_id()

    with pytest.raises(RunNotFound) as caught:
        app.runs.cancel(unknown, reason="typo", actor="alice")

    assert caught.value.run_id == unknown
