"""Waiting for another run, and what operators see of waiting runs, on every backend.

``ctx.wait_for_run`` releases the waiting run until the other run ends, then its next
attempt gets the other run's outcome (succeeded, failed or cancelled, with its result or
failure); a run that already ended is returned at once, an unknown run fails the attempt
and a run cannot wait for itself. A child that ends while its parent is still deciding to
wait resumes the parent all the same. Operators see what a released run waits for, and
cancelling a waiting run cancels it at once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from tenacity import wait_none

from runlane_sqs import (
    ConfigurationError,
    EventType,
    ManualClock,
    Runlane,
    RunNotFound,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.engine.context import RunOutcome
from runlane_sqs.runtime import budget
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.waits_support import drain_all, qualified, throttle_once
from tests.behaviour.worker_support import drain, event_types, status


class Handlers:
    """The tasks of this file; the signal waiter notes what it received."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def child(self, ctx: TaskContext, payload: Any) -> Any:
        ctx.wait_for_signal(f"go-{ctx.run_id}")
        if payload.get("fail"):
            raise ValueError("child broke")
        return {"child": "done"}

    def parent(self, ctx: TaskContext, payload: Any) -> Any:
        outcome = ctx.wait_for_run(payload["child"])
        assert isinstance(outcome, RunOutcome)
        return outcome.to_json()

    def quick(self, ctx: TaskContext, payload: Any) -> Any:
        return payload

    def narcissus(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(ctx.run_id)

    def waits_for(self, ctx: TaskContext, payload: Any) -> None:
        kind = payload["kind"]
        if kind == "signal":
            ctx.wait_for_signal("approval", timeout=60)
        elif kind == "token":
            ctx.wait_for_token(payload["token"])
        elif kind == "run":
            ctx.wait_for_run(payload["other"])
        else:
            ctx.release(delay=timedelta(days=2))

    def signal_waiter(self, ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal(payload["key"])
        self.seen.append((ctx.run_id, result.payload))
        return result.payload


def register(app: Runlane, handlers: Handlers) -> None:
    def quitter(ctx: TaskContext, payload: Any) -> str:
        """A child asked to cancel while its attempt runs, which then finishes anyway."""
        ctx.wait_for_signal(f"go-{ctx.run_id}")
        app.runs.cancel(ctx.run_id, reason="operator changed their mind")
        return "finished anyway"

    app.task(handlers.child, name="child")
    app.task(handlers.parent, name="parent")
    app.task(handlers.quick, name="quick")
    app.task(handlers.narcissus, name="narcissus")
    app.task(handlers.waits_for, name="waits-for")
    app.task(handlers.signal_waiter, name="signal-waiter")
    app.task(quitter, name="quitter")


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(backend: Backend, handlers: Handlers) -> Runlane:
    return backend.app(register=partial(register, handlers=handlers))


def parent_waiting_on_child(app: Runlane, fail: bool, child_task: str = "child") -> tuple[Run, Run]:
    """A child waiting for its ``go-<id>`` signal, and a parent released to wait for it."""
    child = app.trigger(child_task, {"fail": fail})
    parent = app.trigger("parent", {"child": child.id})
    assert drain(app) == 2
    waiting = app.runs.get(parent.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.RUN, child.id)
    return parent, child


def resumed_by(app: Runlane, run_id: str) -> list[Any]:
    return [e.data for e in app.runs.events(run_id) if e.type is EventType.RESUMED]


# waiting for another run ---------------------------------------------------------------


def test_wait_for_run_resumes_the_parent_when_the_child_succeeds(app: Runlane) -> None:
    parent, child = parent_waiting_on_child(app, fail=False)
    assert app.signals.send(f"go-{child.id}") == 1
    assert drain_all(app) == 2
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {
        "run_id": child.id,
        "status": "succeeded",
        "result": {"child": "done"},
        "failure": None,
    }
    assert resumed_by(app, parent.id) == [{"run": child.id, "status": "succeeded"}]


def test_wait_for_run_resumes_the_parent_when_the_child_fails(app: Runlane) -> None:
    parent, child = parent_waiting_on_child(app, fail=True)
    assert app.signals.send(f"go-{child.id}") == 1
    assert drain_all(app) == 2
    assert status(app, child.id) is RunStatus.FAILED
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result["run_id"] == child.id
    assert done.result["status"] == "failed"
    assert done.result["result"] is None
    assert done.result["failure"]["type"] == "builtins.ValueError"
    assert done.result["failure"]["message"] == "child broke"
    assert resumed_by(app, parent.id) == [{"run": child.id, "status": "failed"}]


def test_wait_for_run_resumes_the_parent_when_the_waiting_child_is_cancelled(
    app: Runlane,
) -> None:
    parent, child = parent_waiting_on_child(app, fail=False)
    app.runs.cancel(child.id)
    assert drain(app) == 1
    assert app.runs.get(parent.id).result["status"] == "cancelled"


def test_a_parent_waiting_on_a_running_child_that_is_asked_to_cancel_waits_for_the_end(
    app: Runlane,
) -> None:
    """A cancel request is not an end: the child is still running until its attempt
    ends, so the parent must see the child's final status (``cancelled``)."""
    parent, child = parent_waiting_on_child(app, fail=False, child_task="quitter")
    assert app.signals.send(f"go-{child.id}") == 1
    drain_all(app)
    assert status(app, child.id) is RunStatus.CANCELLED
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result["status"] == "cancelled"


def test_wait_for_a_finished_run_returns_at_once(app: Runlane) -> None:
    child = app.trigger("quick", 5)
    assert drain(app) == 1
    parent = app.trigger("parent", {"child": child.id})
    assert drain(app) == 1
    done = app.runs.get(parent.id)
    assert done.attempt == 1
    assert done.result == {"run_id": child.id, "status": "succeeded", "result": 5, "failure": None}


def test_wait_for_an_unknown_run_fails_the_attempt_with_run_not_found(app: Runlane) -> None:
    run = app.trigger("parent", {"child": "0" * 32})
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == qualified(RunNotFound)


def test_a_run_cannot_wait_for_itself(app: Runlane) -> None:
    run = app.trigger("narcissus")
    assert drain(app) == 1
    failure = app.runs.get(run.id).failure
    assert failure is not None
    assert failure.type == qualified(ConfigurationError)


def test_a_run_finishing_just_before_its_waiter_releases_still_resumes_it(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child ends between the parent's look at it and the parent's release write:
    the child's own resume finds no waiter, so the parent's worker looks once more."""
    child = app.trigger("child", {"fail": False})
    assert drain(app) == 1
    watch = app.store.watch_run

    def watch_then_cancel(run_id: str) -> Run | None:
        seen = watch(run_id)
        app.runs.cancel(run_id, reason="raced")  # finishes while the parent still runs
        return seen

    monkeypatch.setattr(app.store, "watch_run", watch_then_cancel)
    parent = app.trigger("parent", {"child": child.id})
    assert drain(app) == 2  # the parent releases, is resumed at once and runs again
    assert status(app, child.id) is RunStatus.CANCELLED
    assert app.runs.get(parent.id).result["status"] == "cancelled"
    assert event_types(app, parent.id)[2:4] == [EventType.RELEASED, EventType.RESUMED]


# what operators see and do -------------------------------------------------------------


def test_cancelling_a_released_run_cancels_it_at_once(
    app: Runlane, clock: ManualClock, handlers: Handlers
) -> None:
    run = app.trigger("signal-waiter", {"key": "cancel-me"})
    assert drain(app) == 1
    cancelled = app.runs.cancel(run.id, reason="not needed", actor="bob")
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.waiting is None
    assert event_types(app, run.id)[-1] is EventType.CANCELLED
    assert app.signals.send("cancel-me", 1) == 0
    clock.advance(timedelta(days=1))
    app.maintenance.run_pass()
    assert drain(app) == 0
    assert handlers.seen == []


def test_runs_get_shows_what_a_released_run_waits_for(app: Runlane, clock: ManualClock) -> None:
    token = app.tokens.create()
    by_signal = app.trigger("waits-for", {"kind": "signal"})
    by_token = app.trigger("waits-for", {"kind": "token", "token": token.id})
    by_run = app.trigger("waits-for", {"kind": "run", "other": by_token.id})
    by_time = app.trigger("waits-for", {"kind": "time"})
    assert drain(app) == 4
    now = clock.now()
    expected = {
        by_signal.id: (WaitKind.SIGNAL, "approval", now + timedelta(seconds=60)),
        by_token.id: (WaitKind.TOKEN, token.id, None),
        by_run.id: (WaitKind.RUN, by_token.id, None),
        by_time.id: (WaitKind.TIME, None, now + timedelta(days=2)),
    }
    for run_id, (kind, target, until) in expected.items():
        run = app.runs.get(run_id)
        assert run.status is RunStatus.RELEASED
        assert run.waiting is not None
        assert (run.waiting.kind, run.waiting.target, run.waiting.until) == (kind, target, until)
        assert run.waiting.name.startswith(f"{kind.value}:")


# how DynamoDB holds it -----------------------------------------------------------------


def test_a_run_that_is_waited_for_is_marked_watched(
    make_app: Callable[..., Runlane], clock: ManualClock, dynamodb: Any
) -> None:
    """Emulators only: reads the raw DynamoDB item of a child whose parent waits for it."""
    app = make_app(clock=clock)
    register(app, Handlers())
    app.provision()
    _, child = parent_waiting_on_child(app, fail=False)
    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, child.id),
        ConsistentRead=True,
    )["Item"]
    assert item["watched"] == {"N": "1"}


@ONLY_MEMORY
def test_a_wait_for_a_run_whose_watch_meets_throttling_sends_it_again(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marking the awaited run watched is sent again while its budget lasts, as the
    context's other reads and writes are: DynamoDB throttling it once (after botocore's own
    retries) does not fail the waiting run's attempt. Found by the simulation
    (`make simulate SEED=30 ARGS="--runs 300"`)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    refused = throttle_once(app, monkeypatch, "watched")
    parent, child = parent_waiting_on_child(app, fail=False)
    assert refused, "the watch was never throttled: the test proves nothing"
    assert app.runs.get(parent.id).failures == 0
    assert app.signals.send(f"go-{child.id}") == 1
    assert drain_all(app) == 2
    assert app.runs.get(parent.id).status is RunStatus.SUCCEEDED
