"""A caller waits for a run's outcome: ``app.runs.wait`` (and ``wait_async``) return the
finished run, raise ``RunWaitTimedOut`` carrying its last state after the timeout, and
poll with a growing interval, one read per poll."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from runlane_sqs import Runlane, RunNotFound, RunStatus, RunWaitTimedOut, TaskContext
from runlane_sqs.api import waiting
from tests.backends import Backend
from tests.workers import WorkerKind


def register(app: Runlane) -> None:
    @app.task(name="orders.total")
    def total(ctx: TaskContext, payload: Any) -> Any:
        return {"total": sum(payload["items"])}

    @app.task(name="orders.broken")
    def broken(ctx: TaskContext, payload: Any) -> Any:
        raise ValueError("no price list")


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def test_wait_returns_the_result_once_a_worker_finishes_the_run(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    run = app.trigger("orders.total", {"items": [3, 4]})
    with worker_kind.running(app):
        done = app.runs.wait(run.id, timeout=30)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"total": 7}


def test_wait_returns_a_failed_run_with_its_failure(app: Runlane) -> None:
    run = app.trigger("orders.broken", {})
    assert WorkerKind("sync").drain(app) == 1
    done = app.runs.wait(run.id, timeout=0)
    assert done.status is RunStatus.FAILED
    assert done.failure is not None and done.failure.message == "no price list"


def test_wait_gives_up_after_the_timeout_with_the_last_state(app: Runlane) -> None:
    run = app.trigger("orders.total", {"items": [1]})  # no worker runs it
    with pytest.raises(RunWaitTimedOut) as raised:
        app.runs.wait(run.id, timeout=0.05)
    assert raised.value.run.id == run.id
    assert raised.value.run.status is RunStatus.QUEUED
    assert "still queued" in str(raised.value)


def test_wait_async_returns_the_finished_run(app: Runlane) -> None:
    run = app.trigger("orders.total", {"items": [5]})
    assert WorkerKind("sync").drain(app) == 1
    done = asyncio.run(app.runs.wait_async(run.id, timeout=1))
    assert done.result == {"total": 5}
    queued = app.trigger("orders.total", {"items": [6]})
    with pytest.raises(RunWaitTimedOut):
        asyncio.run(app.runs.wait_async(queued.id, timeout=0.05))


def test_wait_for_an_unknown_run_raises_not_found(app: Runlane) -> None:
    with pytest.raises(RunNotFound):
        app.runs.wait("0123456789abcdef0123456789abcdef", timeout=1)


def test_polls_back_off_from_a_tenth_of_a_second_to_five_seconds() -> None:
    delays = waiting.poll_delays()
    assert [next(delays) for _ in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_each_poll_is_one_read_and_the_waits_follow_the_backoff() -> None:
    reads: Counter[str] = Counter()
    slept: list[float] = []
    states = iter([RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RUNNING, RunStatus.SUCCEEDED])

    class Stored:
        id = "r1"

        @property
        def is_terminal(self) -> bool:
            return self.status.is_terminal

        def __init__(self) -> None:
            self.status = next(states)

    def read() -> Any:
        reads["get"] += 1
        return Stored()

    done = waiting.wait_for(read, timeout=None, sleep=slept.append)
    assert done.status is RunStatus.SUCCEEDED
    assert reads["get"] == 4
    assert slept == [0.1, 0.2, 0.4]
