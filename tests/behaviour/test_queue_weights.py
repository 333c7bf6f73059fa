"""Queues polled by weight (docs/operations.md, "Queue weights"): with every queue full,
a worker starts runs of each queue in the ratio of their weights, with both workers; a
queue with nothing waiting passes its turn on, so a weighted worker still drains it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runlane_sqs import ConfigurationError, Runlane, RunStatus, TaskContext
from tests.backends import ONLY_MEMORY, Backend
from tests.workers import WorkerKind

HIGH, LOW = "high", "low"


class Started:
    def __init__(self) -> None:
        self.queues: list[str] = []

    def register(self, app: Runlane) -> None:
        @app.task(name="urgent.send", queue=HIGH)
        def urgent(ctx: TaskContext, payload: Any) -> None:
            self.queues.append(HIGH)

        @app.task(name="bulk.send", queue=LOW)
        def bulk(ctx: TaskContext, payload: Any) -> None:
            self.queues.append(LOW)


@ONLY_MEMORY
def test_with_both_queues_full_starts_follow_the_weights(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """In memory, where a receive brings what it asks for: SQS may bring fewer, so the
    ratio on the emulators is measured with worker processes (tests/processes)."""
    started = Started()
    app = backend.app(register=started.register, queues=[HIGH, LOW])
    app.trigger_many("urgent.send", range(60))
    app.trigger_many("bulk.send", range(60))

    worker = worker_kind.build(app, weights={HIGH: 3}, concurrency=1)
    assert worker_kind.drain_worker(worker, max_runs=40) == 40

    assert Counter(started.queues) == {HIGH: 30, LOW: 10}


def test_a_weighted_worker_drains_a_queue_whose_turn_finds_nothing(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    started = Started()
    app = backend.app(register=started.register, queues=[HIGH, LOW])
    app.trigger_many("bulk.send", range(5))

    worker = worker_kind.build(app, weights={HIGH: 5})
    assert worker_kind.drain_worker(worker) == 5

    assert started.queues == [LOW] * 5


def test_a_trigger_may_send_its_run_to_an_urgent_queue(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    started = Started()
    app = backend.app(register=started.register, queues=[HIGH, LOW])
    urgent = app.trigger("bulk.send", 1, queue=HIGH)
    later = app.trigger("bulk.send", 2)
    assert (app.runs.get(urgent.id).queue, app.runs.get(later.id).queue) == (HIGH, LOW)

    assert worker_kind.drain(app, queues=[HIGH]) == 1  # only the urgent one is there
    assert started.queues == [LOW]  # the handler of bulk.send ran it
    assert app.runs.get(later.id).status is RunStatus.QUEUED


@pytest.mark.parametrize("queue", ["no such queue", "x" * 65, "a\x00b", "<b>"])
def test_a_bad_queue_at_trigger_is_refused_before_anything_is_written(
    backend: Backend, queue: str
) -> None:
    app = backend.app(register=Started().register, queues=[HIGH, LOW])
    with pytest.raises(ConfigurationError, match="queue name"):
        app.trigger("bulk.send", 1, queue=queue)
    assert app.runs.list().runs == []
