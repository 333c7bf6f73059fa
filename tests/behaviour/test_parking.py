"""Runs of a task no worker registers are parked, on every backend: after
``park_after_receives`` receives by workers without the task the run's status is
``parked`` (listed by ``runs.list(status="parked")``), its wakeup is deleted and
maintenance stops republishing it. A worker that registers the task unparks it when it
starts, a maintenance pass whose app registers it unparks it (at most once per
``republish_after``), and an operator can unpark or cancel it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, IllegalTransition, ManualClock, Runlane, RunStatus, TaskContext
from runlane_sqs.core.model import Run
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import drain, event_types, second_app
from tests.workers import WorkerKind

TASK = "parking.elsewhere"
OTHER = "parking.here"


def register_other(app: Runlane) -> None:
    app.task(lambda ctx, payload: payload, name=OTHER)


def register_task(app: Runlane) -> None:
    register_other(app)

    @app.task(name=TASK)
    def elsewhere(ctx: TaskContext, payload: Any) -> Any:
        return {"ran": payload}


@pytest.fixture
def app(backend: Backend) -> Runlane:
    """A worker's app that does not register TASK; it parks at the first receive."""
    return backend.app(register=register_other, park_after_receives=1)


@pytest.fixture
def producer(backend: Backend, app: Runlane) -> Runlane:
    """The app of a newer deployment: it registers TASK."""
    return second_app(backend, app, register_task)


def parked_run(app: Runlane, producer: Runlane) -> Run:
    run = producer.trigger(TASK, {"n": 1})
    assert drain(app) == 0
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.PARKED
    return stored


def test_a_run_of_an_unregistered_task_is_parked_listed_and_no_longer_republished(
    backend: Backend, app: Runlane, producer: Runlane, clock: ManualClock
) -> None:
    run = parked_run(app, producer)

    assert backend.depth(app) == 0  # the wakeup was deleted, not left for the DLQ
    events = app.runs.events(run.id)
    assert [e.type for e in events] == [EventType.TRIGGERED, EventType.PARKED]
    assert events[-1].data["reason"] == "unknown_task"
    assert [r.id for r in app.runs.list(status="parked").runs] == [run.id]
    clock.advance(timedelta(hours=3))
    report = app.maintenance.run_pass()  # this app does not register the task either
    assert report.jobs["due_wakeups"].published == 0
    assert report.jobs["parked_runs"].acted == 0
    assert (backend.depth(app), app.runs.get(run.id).status) == (0, RunStatus.PARKED)


def test_a_worker_that_registers_the_task_unparks_it_when_it_starts(
    worker_kind: WorkerKind, backend: Backend, app: Runlane, producer: Runlane
) -> None:
    run = parked_run(app, producer)

    with worker_kind.running(producer) as started:
        final = producer.runs.wait(run.id, timeout=30)
        started.stop()

    assert (final.status, final.result) == (RunStatus.SUCCEEDED, {"ran": {"n": 1}})
    unparked = [e for e in producer.runs.events(run.id) if e.type is EventType.UNPARKED]
    assert unparked[0].data == {"by": started.worker.worker_id, "reason": "task registered"}


def test_maintenance_whose_app_registers_the_task_unparks_it_once_per_republish_interval(
    backend: Backend, app: Runlane, producer: Runlane, clock: ManualClock
) -> None:
    run = parked_run(app, producer)
    assert producer.maintenance.run_pass().jobs["parked_runs"].acted == 0  # parked just now

    clock.advance(producer.config.republish_after)
    report = producer.maintenance.run_pass()

    assert (report.jobs["parked_runs"].acted, report.jobs["parked_runs"].published) == (1, 1)
    assert drain(producer) == 1
    assert event_types(producer, run.id)[-3:] == [
        EventType.UNPARKED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_an_operator_unparks_or_cancels_a_parked_run(
    backend: Backend, app: Runlane, producer: Runlane
) -> None:
    first, second = parked_run(app, producer), parked_run(app, producer)

    unparked = app.runs.unpark(first.id, actor="alice", reason="deployed v2")
    cancelled = app.runs.cancel(second.id, actor="alice", reason="obsolete")

    assert (unparked.status, cancelled.status) == (RunStatus.QUEUED, RunStatus.CANCELLED)
    assert app.runs.events(first.id)[-1].data == {"by": "alice", "reason": "deployed v2"}
    assert backend.depth(app) == 1  # the unparked run's fresh wakeup
    assert drain(producer) == 1
    assert producer.runs.get(first.id).status is RunStatus.SUCCEEDED
    with pytest.raises(IllegalTransition, match="not parked"):
        app.runs.unpark(first.id)


@ONLY_MEMORY
def test_by_default_a_wakeup_is_left_for_other_workers_for_two_receives(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register_other)
    producer = second_app(backend, app, register_task)
    run = producer.trigger(TASK, None)
    visibility = timedelta(seconds=61)  # the in-memory queue's visibility timeout, and 1 s

    statuses = []
    for _ in range(3):
        assert drain(app) == 0
        statuses.append(app.runs.get(run.id).status)
        clock.advance(visibility)

    assert statuses == [RunStatus.QUEUED, RunStatus.QUEUED, RunStatus.PARKED]
    assert backend.depth(app) == 0
