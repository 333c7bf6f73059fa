"""Retention (docs/operations.md, "Retention"): a finished run carries the time DynamoDB's
TTL may delete it, its task's retention (or the app's) after it finished, and at least
the idempotency retention when it holds an idempotency key; an unfinished run, a run
holding objects of the payload bucket and the runs of an app that keeps them carry none.
An idempotency key past its retention takes a new run that starts from nothing: the old
run's steps and result never come back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import ConfigurationError, Runlane, RunlaneConfig, RunStatus, TaskContext
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.worker_support import drain

KEPT = "retention.kept"
"""Kept for the app's retention (30 days by default)."""
SHORT = "retention.short"
"""Kept for two hours."""
STEPPED = "retention.stepped"
"""Records a step: its side effects are counted."""
BUCKET = "runlane-retention-values"


def register(app: Runlane) -> None:
    app.task(lambda ctx, payload: payload, name=KEPT)
    app.task(lambda ctx, payload: payload, name=SHORT, retention=timedelta(hours=2))


def expires_at(dynamodb: Any, app: Runlane, run_id: str) -> int | None:
    """The TTL attribute of the run's item, as DynamoDB keeps it."""
    key = {"pk": {"S": f"RUN#{app.config.environment}#{run_id}"}, "sk": {"S": "RUN"}}
    item = dynamodb.get_item(TableName=app.config.table, Key=key, ConsistentRead=True)["Item"]
    return int(item["expires_at"]["N"]) if "expires_at" in item else None


@ONLY_AWS
def test_a_finished_run_carries_when_the_ttl_may_delete_it(backend: Backend, dynamodb: Any) -> None:
    app = backend.app(register=register)
    kept, short = app.trigger(KEPT, 1), app.trigger(SHORT, 2)
    keyed = app.trigger(SHORT, 3, idempotency_key="order-3")
    later = app.trigger(KEPT, 4, delay=timedelta(hours=1))
    assert expires_at(dynamodb, app, kept.id) is None  # unfinished: kept
    assert drain(app) == 3

    def finished(run_id: str, after: timedelta) -> int:
        return int((app.runs.get(run_id).updated_at + after).timestamp())

    assert expires_at(dynamodb, app, kept.id) == finished(kept.id, timedelta(days=30))
    assert expires_at(dynamodb, app, short.id) == finished(short.id, timedelta(hours=2))
    # its idempotency key lives 30 days: the run it returns lives as long
    assert expires_at(dynamodb, app, keyed.id) == finished(keyed.id, timedelta(days=30))
    assert expires_at(dynamodb, app, later.id) is None
    assert app.runs.get(keyed.id).retention == timedelta(days=30)


@ONLY_AWS
def test_runs_with_objects_in_the_bucket_and_an_app_that_keeps_runs_carry_none(
    backend: Backend, dynamodb: Any
) -> None:
    large = backend.app(register=register, payload_bucket=BUCKET, inline_limit=1024)
    run = large.trigger(KEPT, {"blob": "x" * 4096})
    assert drain(large) == 1
    assert expires_at(dynamodb, large, run.id) is None  # runs prune takes its references off

    forever = backend.app(register=register, retention=None)
    kept = forever.trigger(KEPT, 1)
    assert drain(forever) == 1
    assert expires_at(dynamodb, forever, kept.id) is None


def test_a_reused_idempotency_key_starts_a_new_run_from_nothing(backend: Backend) -> None:
    calls: list[int] = []

    def stepped(app: Runlane) -> None:
        @app.task(name=STEPPED)
        def charge(ctx: TaskContext, payload: Any) -> Any:
            return ctx.step("charge", lambda: calls.append(payload) or len(calls))

    app = backend.app(register=stepped)
    first = app.trigger(STEPPED, 1, idempotency_key="order-9")
    assert drain(app) == 1
    assert app.trigger(STEPPED, 1, idempotency_key="order-9").id == first.id  # held

    backend.clock.advance(app.config.idempotency_retention + timedelta(seconds=1))
    second = app.trigger(STEPPED, 2, idempotency_key="order-9")
    assert second.created and second.id != first.id
    assert (second.steps, second.result) == ({}, None)
    assert drain(app) == 1
    done = app.runs.get(second.id)
    assert (done.status, done.result, calls) == (RunStatus.SUCCEEDED, 2, [1, 2])
    assert app.runs.find_current(STEPPED, "order-9").id == second.id
    assert app.runs.get(first.id).result == 1  # the old run is its own, untouched


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RunlaneConfig(retention=timedelta(minutes=10)), "retention must be at least"),
        (lambda: RunlaneConfig.build(retention=-5), "retention"),
        (
            lambda: RunlaneConfig.from_env({"RUNLANE_RETENTION_SECONDS": "a week"}),
            "RUNLANE_RETENTION_SECONDS must be a number of seconds",
        ),
    ],
)
def test_a_bad_retention_is_refused(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_a_bad_task_retention_is_refused(backend: Backend) -> None:
    app = backend.app()
    with pytest.raises(ConfigurationError, match="retention must be at least 1:00:00"):
        app.task(lambda ctx, p: p, name="bad.retention", retention=60)
    env = RunlaneConfig.from_env({"RUNLANE_RETENTION_SECONDS": "7200"})
    assert env.retention == timedelta(hours=2)
