"""A write that DynamoDB applied but whose response the network dropped (emulators only).

botocore sends the same conditional write again, and its condition now fails against
the state the first one wrote. The store recognizes its own write in the item returned
with the refusal and carries on: a claim runs its attempt once, an outcome is not
reported as discarded, and a trigger returns its run instead of raising, so a producer
that retries does not create a second run. A proxy in front of DynamoDB drops the
responses (tests/faults.py)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from runlane_sqs import EventType, ManualClock, RetryPolicy, Runlane, RunStatus, TaskContext
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.worker_support import drain, event_types
from tests.faults import Drops, dropping_proxy
from tests.workers import WorkerKind

pytestmark = ONLY_AWS

UPDATE = "DynamoDB_20120810.UpdateItem"
PUT = "DynamoDB_20120810.PutItem"
OK = "lost.ok"
FLAKY = "lost.flaky"


class Calls:
    def __init__(self) -> None:
        self.attempts: dict[str, list[int]] = {}

    def register(self, app: Runlane) -> None:
        @app.task(name=OK)
        def ok(ctx: TaskContext, payload: Any) -> Any:
            self.attempts.setdefault(ctx.run_id, []).append(ctx.attempt)
            return {"ok": payload}

        @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=3, delay=0, backoff="fixed"))
        def flaky(ctx: TaskContext, payload: Any) -> Any:
            self.attempts.setdefault(ctx.run_id, []).append(ctx.attempt)
            if ctx.attempt == 1:
                raise RuntimeError("first attempt fails")
            return {"ok": payload}


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def proxied(
    backend: Backend, calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Runlane, Drops]]:
    """An app whose DynamoDB requests go through the dropping proxy."""
    backend.request.getfixturevalue("backend_env")
    upstream = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ["AWS_ENDPOINT_URL"]
    with dropping_proxy(upstream) as (url, drops):
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
        yield backend.app(register=calls.register), drops


def test_a_claim_whose_responses_were_lost_three_times_runs_its_attempt_once(
    worker_kind: WorkerKind,
    proxied: tuple[Runlane, Drops],
    calls: Calls,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, drops = proxied
    run = app.trigger(OK, 1)
    for _ in range(3):  # the claim and two of botocore's resends
        drops.drop_next(UPDATE, contains='"started"')
    caplog.set_level(logging.INFO, logger="runlane_sqs")

    assert worker_kind.drain(app) == 1

    assert drops.dropped == [UPDATE] * 3
    final = app.runs.get(run.id)
    assert (final.status, final.attempt, final.lease_losses) == (RunStatus.SUCCEEDED, 1, 0)
    assert calls.attempts == {run.id: [1]}
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert "already applied" in caplog.text and "claim_lost" not in caplog.text


def test_an_outcome_whose_response_was_lost_is_not_reported_discarded(
    proxied: tuple[Runlane, Drops], calls: Calls, caplog: pytest.LogCaptureFixture
) -> None:
    app, drops = proxied
    run = app.trigger(FLAKY, 2)
    drops.drop_next(UPDATE, contains='"attempt_failed"')
    drops.drop_next(UPDATE, contains='"succeeded"')

    assert drain(app) == 2

    assert drops.dropped == [UPDATE, UPDATE]
    final = app.runs.get(run.id)
    assert (final.status, final.failures, final.result) == (RunStatus.SUCCEEDED, 1, {"ok": 2})
    assert calls.attempts == {run.id: [1, 2]}
    assert "discarded" not in caplog.text


def test_a_trigger_whose_response_was_lost_returns_its_one_run(
    proxied: tuple[Runlane, Drops], backend: Backend, clock: ManualClock
) -> None:
    app, drops = proxied
    drops.drop_next(PUT, contains='"triggered"')

    run = app.trigger(OK, 3)

    assert drops.dropped == [PUT]
    assert run.created
    assert [r.id for r in app.runs.list().runs] == [run.id]
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
