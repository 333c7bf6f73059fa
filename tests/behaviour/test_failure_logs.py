"""Failures that alert, on every backend and with both workers: an attempt that raises is
logged on ``runlane_sqs.task`` at WARNING when a retry follows and at ERROR when the run
failed, with the run's context fields and the recorded traceback (``traceback``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext
from tests.backends import Backend
from tests.workers import WorkerKind

TASK = "alerts.charge"


def register(app: Runlane) -> None:
    @app.task(name=TASK, retry=RetryPolicy(max_attempts=2, delay=0))
    def charge_card(ctx: TaskContext, payload: Any) -> Any:
        raise RuntimeError(f"gateway refused charge {payload}")


def test_a_retried_failure_warns_and_the_last_one_is_an_error_with_its_traceback(
    backend: Backend, worker_kind: WorkerKind, caplog: pytest.LogCaptureFixture
) -> None:
    app = backend.app(register=register)
    run = app.trigger(TASK, 7)
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).status is RunStatus.FAILED
    failed = [
        r for r in caplog.records if r.name == "runlane_sqs.task" and r.levelno >= logging.WARNING
    ]
    assert [(r.levelno, r.attempt) for r in failed] == [  # type: ignore[attr-defined]
        (logging.WARNING, 1),
        (logging.ERROR, 2),
    ]
    retry, last = failed
    assert "retry due at" in retry.getMessage()
    assert retry.getMessage().endswith("gateway refused charge 7")
    assert last.getMessage() == "attempt 2 failed; run failed: gateway refused charge 7"
    for record in failed:
        assert (record.run_id, record.task) == (run.id, TASK)  # type: ignore[attr-defined]
        assert record.worker_id  # type: ignore[attr-defined]
        trace = record.traceback  # type: ignore[attr-defined]
        assert trace.startswith("Traceback (most recent call last):")
        assert "in charge_card" in trace
        assert trace.rstrip().endswith("RuntimeError: gateway refused charge 7")
    assert last.traceback == app.runs.get(run.id).failure.traceback  # type: ignore[attr-defined,union-attr]
