"""Metrics, on every backend and with both workers: what OpenTelemetry's meter (the SDK's
in-memory reader) and the CloudWatch EMF lines count for runs, attempts, skipped
wakeups and maintenance passes (docs/observability.md, "Metrics")."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext, Telemetry
from runlane_sqs.core.wakeup import Wakeup
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import claim_elsewhere
from tests.otel import Recorded, recorded  # noqa: F401 (a fixture)
from tests.workers import WorkerKind

FLAKY = "measured.flaky"
QUICK = "measured.quick"


def register(app: Runlane) -> None:
    @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=3, delay=0))
    def flaky(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise RuntimeError("declined")
        return "ok"

    @app.task(name=QUICK)
    def quick(ctx: TaskContext, payload: Any) -> Any:
        return payload


def test_runs_attempts_and_outcomes_are_counted_by_task(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app = backend.app(register=register, telemetry=recorded.telemetry(tracing=False))
    flaky = app.trigger(FLAKY)
    app.trigger(QUICK, 1)
    app.trigger(QUICK, 2)
    worker_kind.drain_all(app)
    assert app.runs.get(flaky.id).status is RunStatus.SUCCEEDED

    assert recorded.counts("runlane.runs.triggered", "runlane.task") == {FLAKY: 1, QUICK: 2}
    assert recorded.counts("runlane.attempts.started", "runlane.task") == {FLAKY: 2, QUICK: 2}
    ended = {
        (attrs["runlane.task"], attrs["runlane.outcome"]): int(point.value)
        for attrs, point in recorded.points("runlane.attempts.ended")
    }
    assert ended == {(FLAKY, "retrying"): 1, (FLAKY, "succeeded"): 1, (QUICK, "succeeded"): 2}
    durations = {
        (attrs["runlane.task"], attrs["runlane.outcome"]): point.count
        for attrs, point in recorded.points("runlane.attempt.duration")
    }
    assert durations == {(FLAKY, "retrying"): 1, (FLAKY, "succeeded"): 1, (QUICK, "succeeded"): 2}
    lags = recorded.points("runlane.wakeup.lag")
    assert sum(point.count for _, point in lags) == 4
    assert all(point.min >= 0 for _, point in lags)
    (duration_unit,) = {
        m.unit
        for r in recorded.reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for s in r.scope_metrics
        for m in s.metrics
        if m.name == "runlane.attempt.duration"
    }
    assert duration_unit == "s"


def test_skipped_wakeups_are_counted_by_reason(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app = backend.app(register=register, telemetry=recorded.telemetry(tracing=False))
    run = app.trigger(QUICK)
    worker_kind.drain_all(app)
    duplicate = Wakeup(run.environment, run.id, run.queue, backend.clock.now())
    foreign = Wakeup("elsewhere", run.id, run.queue, backend.clock.now())
    app.transport.publish([duplicate, duplicate], None)
    worker_kind.drain(app)
    app.transport.publish([foreign], None)
    worker_kind.drain(app)

    skipped = recorded.counts("runlane.wakeups.skipped", "runlane.reason")
    assert skipped["terminal"] == 2
    assert skipped["foreign_environment"] >= 1  # returned to its queue: seen again


def test_a_maintenance_pass_counts_what_it_did_and_how_long_it_took(
    backend: Backend,
    recorded: Recorded,  # noqa: F811
) -> None:
    app = backend.app(register=register, telemetry=recorded.telemetry(tracing=False))
    app.trigger(QUICK, delay=timedelta(hours=1))  # beyond SQS's delay: maintenance's
    backend.clock.advance(timedelta(hours=1, seconds=1))
    app.maintenance.run_pass()
    app.maintenance.run_pass()

    assert recorded.counts("runlane.maintenance.runs", "runlane.action") == {"published": 1}
    ((_, point),) = recorded.points("runlane.maintenance.duration")
    assert point.count == 2


@ONLY_MEMORY
def test_the_wakeup_lag_counts_from_the_end_of_its_delay(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app = backend.app(register=register, telemetry=recorded.telemetry(tracing=False))
    app.trigger(QUICK, delay=timedelta(seconds=40))
    backend.clock.advance(timedelta(seconds=45))
    worker_kind.drain_all(app)

    ((_, point),) = recorded.points("runlane.wakeup.lag")
    assert point.count == 1
    assert 4.9 <= point.sum <= 5.1  # 45 s after the trigger, 5 s after the wakeup was due


def test_emf_lines_carry_the_same_counts_for_cloudwatch(
    backend: Backend, worker_kind: WorkerKind, capsys: pytest.CaptureFixture[str]
) -> None:
    telemetry = Telemetry(tracing=False, metrics=("emf",), emf_namespace="shop")
    app = backend.app(register=register, telemetry=telemetry)
    app.trigger(FLAKY)
    worker_kind.drain_all(app)  # a worker flushes when it stops
    app.observer.flush()  # the trigger's count, if no worker flushed after it

    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ended: dict[str, int] = {}
    for document in documents:
        if "runlane.attempts.ended" in document:
            outcome = document["Outcome"]
            ended[outcome] = ended.get(outcome, 0) + document["runlane.attempts.ended"]
    assert ended == {"retrying": 1, "succeeded": 1}
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "shop"
        assert document["Environment"] == app.config.environment
    triggered = [d for d in documents if "runlane.runs.triggered" in d]
    assert [(d["Task"], d["runlane.runs.triggered"]) for d in triggered] == [(FLAKY, 1)]


def test_runs_a_full_concurrency_limit_made_wait_are_counted(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    def limited(app: Runlane) -> None:
        app.task(lambda ctx, p: p, name="limited.sync", queue=app.queue("one", concurrency_limit=1))

    app = backend.app(register=limited, queues=["one"], telemetry=recorded.telemetry(tracing=False))
    held = app.trigger("limited.sync", 1)
    waiting = [app.trigger("limited.sync", n) for n in (2, 3)]
    claim_elsewhere(app, held.id)

    assert worker_kind.drain(app) == 0
    assert all(app.runs.get(r.id).slot_wait for r in waiting)
    delayed = {
        (attrs["runlane.task"], attrs["runlane.queue"], attrs["runlane.reason"]): int(point.value)
        for attrs, point in recorded.points("runlane.runs.delayed")
    }
    assert delayed == {("limited.sync", "one", "slot"): 2}
