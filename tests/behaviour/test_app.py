"""Triggering runs through the app: by task name or task object, now or after a delay.

A trigger that cannot be honoured (an unknown task, a payload that is not JSON or is
over the app's payload limit) raises a clear error and writes nothing: no run, no
wakeup. A delay of any length works: a short one rides the wakeup's SQS delay, a long
one is kept as the run's due time in storage and published by maintenance when due.
The handler gets the payload as stored (read back from its JSON), not the caller's
object.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    InvalidPayloadError,
    PayloadTooLarge,
    Runlane,
    RunStatus,
    TaskContext,
    UnknownTaskError,
)
from runlane_sqs.engine.reports import JOB_DUE
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import SYNC_WORKER

WORK = "app.work"
PAYLOAD_LIMIT = 100


class Tasks:
    """One task that records each payload it gets and echoes it."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def register(self, app: Runlane) -> None:
        app.task(self.work, name=WORK)

    def work(self, ctx: TaskContext, payload: Any) -> Any:
        self.calls.append(payload)
        return {"echo": payload}


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


@pytest.fixture
def small_app(backend: Backend, tasks: Tasks) -> Runlane:
    """Payloads of at most ``PAYLOAD_LIMIT`` bytes of JSON."""
    return backend.app(register=tasks.register, payload_limit=PAYLOAD_LIMIT)


def assert_nothing_written(backend: Backend, app: Runlane) -> None:
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0


def test_a_task_object_triggers_like_its_name(app: Runlane, tasks: Tasks) -> None:
    task = app.tasks.get(WORK)
    assert task is not None
    by_object = app.trigger(task, 1)
    by_name = app.trigger(WORK, 2)

    assert SYNC_WORKER.drain(app) == 2

    assert sorted(tasks.calls) == [1, 2]
    assert app.runs.get(by_object.id).task == app.runs.get(by_name.id).task == WORK


# --- bad input: nothing written --------------------------------------------------------


def test_an_unknown_task_is_refused(backend: Backend, app: Runlane) -> None:
    with pytest.raises(UnknownTaskError, match="nope"):
        app.trigger("nope", {})
    assert_nothing_written(backend, app)


@pytest.mark.parametrize(
    "payload",
    [object(), {"when": timedelta(1)}, {"n": float("nan")}, {"s": {1, 2}}, [b"bytes"]],
    ids=["object", "timedelta", "nan", "set", "bytes"],
)
def test_a_payload_that_is_not_json_is_refused(
    backend: Backend, app: Runlane, payload: Any
) -> None:
    with pytest.raises(InvalidPayloadError):
        app.trigger(WORK, payload)
    assert_nothing_written(backend, app)


def test_a_payload_over_the_limit_is_refused(backend: Backend, small_app: Runlane) -> None:
    small_app.trigger(WORK, {"data": "x" * 80})  # 91 bytes of JSON: fits
    with pytest.raises(PayloadTooLarge) as refused:
        small_app.trigger(WORK, {"data": "x" * 90})
    assert (refused.value.limit, refused.value.size) == (PAYLOAD_LIMIT, 101)
    assert len(small_app.runs.list().runs) == 1
    assert backend.depth(small_app) == 1


def test_a_payload_over_the_limit_in_bytes_writes_nothing(
    backend: Backend, small_app: Runlane
) -> None:
    with pytest.raises(PayloadTooLarge):
        small_app.trigger(WORK, {"data": "é" * 50})  # 50 characters, 100+ bytes
    assert_nothing_written(backend, small_app)


# --- delays ---------------------------------------------------------------------------


@ONLY_MEMORY
def test_a_short_delay_runs_when_due(backend: Backend, app: Runlane, tasks: Tasks) -> None:
    """Memory only: the wakeup rides an SQS delay, which on the emulators passes in real
    time, not with the test's clock."""
    run = app.trigger(WORK, delay=600)
    assert app.runs.get(run.id).due_at == backend.clock.now() + timedelta(seconds=600)
    assert SYNC_WORKER.drain(app) == 0
    backend.clock.advance(599)
    assert SYNC_WORKER.drain(app) == 0
    backend.clock.advance(1)
    assert SYNC_WORKER.drain(app) == 1
    assert tasks.calls == [None]


def test_a_long_delay_is_kept_in_storage_not_in_the_queue(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    start = backend.clock.now()
    run = app.trigger(WORK, {"later": True}, delay=timedelta(hours=2))
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.due_at == start + timedelta(hours=2)
    assert app.runs.events(run.id)[0].data == {"due_at": stored.due_at.isoformat()}
    assert backend.depth(app) == 0
    assert SYNC_WORKER.drain(app) == 0

    backend.clock.advance(timedelta(hours=2))
    assert SYNC_WORKER.drain(app) == 0  # no wakeup yet: maintenance publishes it when due
    assert tasks.calls == []
    stored = app.runs.get(run.id)
    assert (stored.status, stored.due_at) == (RunStatus.QUEUED, start + timedelta(hours=2))


def test_a_long_delay_runs_once_maintenance_publishes_it(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    run = app.trigger(WORK, delay=timedelta(days=3))
    backend.clock.advance(timedelta(days=3) - timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 0
    assert SYNC_WORKER.drain(app) == 0

    backend.clock.advance(1)
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert SYNC_WORKER.drain(app) == 1
    assert tasks.calls == [None]
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


# --- payloads -------------------------------------------------------------------------


def test_the_handler_sees_the_payload_as_stored_json(app: Runlane, tasks: Tasks) -> None:
    payload: dict[Any, Any] = {"ids": (1, 2), 3: "three"}
    run = app.trigger(WORK, payload)
    payload["ids"] = "changed after trigger"

    assert SYNC_WORKER.drain(app) == 1

    assert tasks.calls == [{"ids": [1, 2], "3": "three"}]
    assert app.runs.get(run.id).result == {"echo": {"ids": [1, 2], "3": "three"}}
