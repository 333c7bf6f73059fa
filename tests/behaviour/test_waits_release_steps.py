"""Releases and durable steps, on every backend, with time moved by hand.

A release ends an attempt without a failure: it costs no retry, the run is not started
again before its time, and the next attempt starts the handler from the beginning.
``run.attempt`` counts every start (a release ends an attempt too); the retry policy
counts ``run.failures`` only, so waiting never uses up retries. A durable step's side
effect happens once: later attempts of the same run get the recorded value, the same
value the recording attempt saw. Releases longer than SQS's delay limit live in storage
and are published by maintenance when due, so tests move the clock instead of waiting.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError
from tenacity import wait_none

from runlane_sqs import (
    EventType,
    InvalidPayloadError,
    ManualClock,
    PayloadTooLarge,
    RetryPolicy,
    Runlane,
    RunStatus,
    StepError,
    TaskContext,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core.model import WaitKind
from runlane_sqs.engine.reports import JOB_DUE, PassReport
from runlane_sqs.runtime import budget
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.waits_support import drain_all, published, qualified, throttle_once
from tests.behaviour.worker_support import drain, event_types, status

LATER = timedelta(hours=1)
"""A release past SQS's 15-minute delay limit: left to maintenance, so time moves by hand."""
CHARGE = {"charge_id": "ch-1", "amount": 42}


def pass_time(app: Runlane, clock: ManualClock, delay: timedelta = LATER) -> PassReport:
    """Move the clock on and run a maintenance pass, which publishes what came due."""
    clock.advance(delay)
    return app.maintenance.run_pass()


def place_one(ctx: TaskContext) -> Any:
    return ctx.step("shared", lambda: "from place one")


def place_two(ctx: TaskContext) -> Any:
    return ctx.step("shared", lambda: "from place two")


class Handlers:
    """The tasks of this file; each notes what the test checks (attempts, side effects)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.step_calls: list[Any] = []
        """Each call of a step body: a step's side effect."""
        self.seen: list[Any] = []
        """What the handler got back from a step, attempt after attempt."""
        self.swallowed: list[BaseException] = []

    def step_body(self, value: Any) -> Callable[[], Any]:
        def body() -> Any:
            self.step_calls.append(value)
            return value

        return body

    def later(self, ctx: TaskContext, payload: Any) -> str:
        self.starts.append(ctx.attempt)
        if ctx.attempt == 1:  # the next attempt starts the handler from the beginning
            ctx.release(delay=timedelta(hours=3))
        return "done"

    def soon(self, ctx: TaskContext, payload: Any) -> None:
        self.starts.append(ctx.attempt)
        if ctx.attempt == 1:
            ctx.release(delay=30)

    def bad_release(self, ctx: TaskContext, payload: Any) -> None:
        ctx.release()

    def patient(self, ctx: TaskContext, payload: Any) -> str:
        self.starts.append(ctx.attempt)
        if ctx.attempt <= 2:
            ctx.release(delay=0)
        if ctx.attempt == 3:
            raise RuntimeError("flaky")
        return "ok"

    def careless(self, ctx: TaskContext, payload: Any) -> str:
        try:
            ctx.wait_for_signal("careless-key")
        except Exception as exc:
            self.swallowed.append(exc)
            return "swallowed"
        return "received"

    def checkout(self, ctx: TaskContext, payload: Any) -> Any:
        receipt = ctx.step("charge", self.step_body(CHARGE))
        self.seen.append(receipt)
        if ctx.attempt == 1:
            ctx.release(delay=timedelta(hours=3))
        return receipt

    def retrying(self, ctx: TaskContext, payload: Any) -> Any:
        value = ctx.step("once", self.step_body(ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("after the step")
        return value

    def twice(self, ctx: TaskContext, payload: Any) -> None:
        ctx.step("same", self.step_body("first"))
        ctx.step("same", self.step_body("second"))

    def moved(self, ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            place_one(ctx)
            ctx.release(delay=LATER)
        return place_two(ctx)

    def opaque(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.step("thing", lambda: {"when": object()})

    def shapes(self, ctx: TaskContext, payload: Any) -> None:
        self.seen.append(ctx.step("lookup", lambda: {1: ("a", "b")}))
        if ctx.attempt == 1:
            ctx.release(delay=LATER)

    def bracketed(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.step("line_items[0]", self.step_body("first item"))

    def hoarder(self, ctx: TaskContext, payload: Any) -> str:
        for n in range(8):
            ctx.step(f"chunk-{n}", lambda: "x" * 60_000)
        return "kept everything"

    async def async_waiter(self, ctx: TaskContext, payload: Any) -> Any:
        value = ctx.step("once", self.step_body("stepped"))
        signal = ctx.wait_for_signal("async-key")
        return {"step": value, "signal": signal.payload}


def register(app: Runlane, handlers: Handlers) -> None:
    at_once = RetryPolicy(max_attempts=2, delay=0, backoff="fixed")
    app.task(handlers.later, name="later", retry=RetryPolicy(max_attempts=1))
    app.task(handlers.soon, name="soon")
    app.task(handlers.bad_release, name="bad-release")
    app.task(handlers.patient, name="patient", retry=at_once)
    app.task(handlers.careless, name="careless")
    app.task(handlers.checkout, name="checkout")
    app.task(handlers.retrying, name="retrying", retry=at_once)
    app.task(handlers.twice, name="twice")
    app.task(handlers.moved, name="moved")
    app.task(handlers.opaque, name="opaque")
    app.task(handlers.shapes, name="shapes")
    app.task(handlers.bracketed, name="bracketed")
    app.task(handlers.hoarder, name="hoarder")
    app.task(handlers.async_waiter, name="async-waiter")


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(backend: Backend, handlers: Handlers) -> Runlane:
    return backend.app(register=partial(register, handlers=handlers))


# release until a time ------------------------------------------------------------------


def test_a_release_three_hours_ahead_is_not_run_early_and_costs_no_retry(
    app: Runlane, backend: Backend, clock: ManualClock, handlers: Handlers
) -> None:
    run = app.trigger("later")
    assert drain(app) == 1
    released = app.runs.get(run.id)
    assert released.status is RunStatus.RELEASED
    assert released.due_at == clock.now() + timedelta(hours=3)
    assert released.waiting is not None
    assert released.waiting.kind is WaitKind.TIME
    assert released.waiting.until == released.due_at
    assert released.lease is None
    assert (released.failures, released.failure) == (0, None)
    assert backend.depth(app) == 0  # too far ahead for SQS: kept in storage only

    assert drain(app) == 0
    report = pass_time(app, clock, timedelta(hours=2, minutes=59, seconds=59))
    assert published(report) == 0
    assert backend.depth(app) == 0
    assert drain(app) == 0
    assert handlers.starts == [1]

    report = pass_time(app, clock, timedelta(seconds=1))
    assert report.jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    assert handlers.starts == [1, 2]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == "done"
    # attempt counts every start; the retry policy (max_attempts=1) counts failures only
    assert (done.attempt, done.failures, done.failure) == (2, 0, None)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.RELEASED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    released_event = app.runs.events(run.id)[2]
    assert released_event.attempt == 1
    assert released_event.data["wait"]["kind"] == "time"


@ONLY_MEMORY
def test_a_short_release_is_published_at_once_with_a_delay(
    app: Runlane, backend: Backend, clock: ManualClock, handlers: Handlers
) -> None:
    """Memory only: a release within SQS's delay limit is published at once with
    ``DelaySeconds``, which SQS counts in real seconds, not on the test's clock."""
    run = app.trigger("soon")
    assert drain(app) == 1
    assert backend.depth(app) == 1
    clock.advance(29)
    assert drain(app) == 0
    clock.advance(1)
    assert drain(app) == 1
    assert handlers.starts == [1, 2]
    assert status(app, run.id) is RunStatus.SUCCEEDED


def test_release_needs_exactly_one_of_delay_and_until(app: Runlane) -> None:
    run = app.trigger("bad-release")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.errors.ConfigurationError"


def test_a_run_released_twice_then_failing_still_gets_its_retry(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger("patient")
    assert drain_all(app) == 4
    assert handlers.starts == [1, 2, 3, 4]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert (done.attempt, done.failures) == (4, 1)
    types = event_types(app, run.id)
    assert types.count(EventType.RELEASED) == 2
    assert types.count(EventType.ATTEMPT_FAILED) == 1


def test_except_exception_in_a_handler_does_not_swallow_a_wait(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger("careless")
    assert drain(app) == 1
    assert handlers.swallowed == []
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.RELEASED
    assert stored.failure is None


# durable steps -------------------------------------------------------------------------


def test_a_step_side_effect_happens_once_and_its_value_is_replayed_after_a_release(
    app: Runlane, backend: Backend, clock: ManualClock, handlers: Handlers
) -> None:
    run = app.trigger("checkout", {"order": 7})
    assert drain(app) == 1
    released = app.runs.get(run.id)
    assert released.status is RunStatus.RELEASED
    assert released.steps["charge"]["value"] == CHARGE
    assert (released.failures, released.failure, released.lease) == (0, None, None)
    assert backend.depth(app) == 0

    assert published(pass_time(app, clock, timedelta(hours=2, minutes=59))) == 0
    assert drain(app) == 0
    assert pass_time(app, clock, timedelta(minutes=1)).jobs[JOB_DUE].published == 1
    assert drain(app) == 1

    assert handlers.step_calls == [CHARGE]
    assert handlers.seen == [CHARGE, CHARGE]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == CHARGE
    assert (done.attempt, done.failures, done.failure) == (2, 0, None)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.STEP_RECORDED,
        EventType.RELEASED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_step_recorded_before_a_failure_is_replayed_by_the_retry(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger("retrying")
    assert drain_all(app) == 2
    assert handlers.step_calls == [1]
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.failures) == (RunStatus.SUCCEEDED, 1, 1)


def test_a_step_returns_the_same_value_when_recorded_and_when_replayed(
    app: Runlane, clock: ManualClock, handlers: Handlers
) -> None:
    """``fn``'s result is stored as JSON; the attempt that records it must see what later
    attempts will see, or code after the step behaves differently after a resume
    (a tuple comes back as a list, integer keys as strings)."""
    app.trigger("shapes")
    assert drain(app) == 1
    pass_time(app, clock)
    assert drain(app) == 1
    first, replayed = handlers.seen
    assert first == replayed, f"recording attempt saw {first!r}, the replay {replayed!r}"


def test_a_step_name_used_twice_in_one_attempt_fails_the_attempt(
    app: Runlane, handlers: Handlers
) -> None:
    run = app.trigger("twice")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == qualified(StepError)
    assert "twice in one attempt" in failed.failure.message
    assert handlers.step_calls == ["first"]


def test_a_step_name_reused_from_another_function_on_a_later_attempt_fails(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger("moved")
    assert drain(app) == 1
    pass_time(app, clock)
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == qualified(StepError)
    assert "place_one" in failed.failure.message
    assert "place_two" in failed.failure.message


def test_a_step_result_that_is_not_json_fails_the_attempt_and_is_not_recorded(
    app: Runlane,
) -> None:
    run = app.trigger("opaque")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == qualified(InvalidPayloadError)
    assert "step 'thing'" in failed.failure.message
    assert failed.steps == {}
    assert EventType.STEP_RECORDED not in event_types(app, run.id)


def test_a_step_name_with_brackets_is_recorded_like_any_other(
    app: Runlane, handlers: Handlers
) -> None:
    """Step names are free text (1 to 128 characters); DynamoDB writes each step into the
    ``steps`` map by document path, so the name must be passed as one map key."""
    run = app.trigger("bracketed")
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.failure is None, done.failure.message if done.failure else ""
    assert done.status is RunStatus.SUCCEEDED
    assert done.steps["line_items[0]"]["value"] == "first item"
    assert handlers.step_calls == ["first item"]


def test_steps_that_outgrow_the_run_item_fail_the_run_instead_of_wedging_it(
    app: Runlane,
) -> None:
    """Each step value is within the payload limit (64 KB), but steps accumulate in the
    run's one DynamoDB item (400 KB at most, shared with payload and history). When the
    next step cannot fit, the attempt must end with a recorded failure: a run whose item
    is full can record nothing more (no outcome, no lease expiry) and stays running."""
    run = app.trigger("hoarder")
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED, (stored.status, len(stored.steps))
    assert stored.failure is not None
    assert stored.failure.type == qualified(PayloadTooLarge)
    assert "step 'chunk-4'" in stored.failure.message
    assert sorted(stored.steps) == [f"chunk-{n}" for n in range(4)]


def test_an_async_handler_can_step_and_wait(app: Runlane, handlers: Handlers) -> None:
    run = app.trigger("async-waiter")
    assert drain(app) == 1
    assert status(app, run.id) is RunStatus.RELEASED
    assert app.signals.send("async-key", 9) == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"step": "stepped", "signal": 9}
    assert handlers.step_calls == ["stepped"]


# how DynamoDB holds them ---------------------------------------------------------------


def test_a_step_is_stored_as_json_on_the_run_item_and_a_time_wait_is_not_indexed(
    make_app: Callable[..., Runlane], clock: ManualClock, dynamodb: Any, handlers: Handlers
) -> None:
    """Emulators only: reads the raw DynamoDB item of a run released for three hours."""
    app = make_app(clock=clock)
    register(app, handlers)
    app.provision()
    run = app.trigger("checkout")
    assert drain(app) == 1
    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run.id),
        ConsistentRead=True,
    )["Item"]
    assert item["status"]["S"] == RunStatus.RELEASED.value
    assert json.loads(item["steps"]["M"]["charge"]["S"])["value"] == CHARGE
    assert "wait_pk" not in item  # time waits are found by due time, not on the waits index


# storage that fails a moment ------------------------------------------------------------


@ONLY_MEMORY
def test_a_step_whose_write_meets_throttling_is_recorded_on_the_next_try(
    app: Runlane, handlers: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's write fenced on the attempt's lease is sent again while its budget lasts,
    like the path's own writes: DynamoDB throttling one write (after botocore's own
    retries) neither fails the attempt nor runs the step twice. Found by the simulation
    (simulation/, docs/reliability.md)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    refused = throttle_once(app, monkeypatch, "steps")
    run = app.trigger("retrying")
    assert drain_all(app) == 2
    assert refused, "the step's write was never throttled: the test proves nothing"
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.failures) == (RunStatus.SUCCEEDED, 1, 1)
    assert handlers.step_calls == [1]


@ONLY_MEMORY
def test_a_step_whose_write_landed_but_whose_answer_was_lost_is_taken_as_recorded(
    app: Runlane, handlers: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's write lands but its answer is lost: sent again, it is refused (the run
    moved on by that very write), and the run as it now is holds the step under this
    attempt's lease. That is the attempt's own write: the step counts as recorded, the
    attempt goes on, and the step's function is not called again. Found by the simulation
    (``make simulate SEED=27 ARGS="--runs 300"``, docs/simulation.md)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    client = app.store.dynamodb  # type: ignore[attr-defined]
    send = client.update_item
    lost: list[str] = []

    def answer_lost_once(**request: Any) -> Any:
        response = send(**request)
        if not lost and "steps" in json.dumps(request.get("ExpressionAttributeNames", {})):
            lost.append(request["Key"]["pk"]["S"])
            stepped = app.store.get_run(run.id)  # the heartbeat renews the lease meanwhile
            assert stepped is not None and stepped.lease is not None
            later = replace(stepped.lease, expires_at=stepped.lease.expires_at + LATER)
            app.store.renew_lease(stepped, later)
            raise ReadTimeoutError(endpoint_url="http://dynamodb")
        return response

    def stepped(ctx: TaskContext, payload: Any) -> Any:
        return ctx.step("once", handlers.step_body(ctx.attempt)) + 1

    app.task(stepped, name="stepped")
    monkeypatch.setattr(client, "update_item", answer_lost_once)
    run = app.trigger("stepped")
    assert drain_all(app) == 1
    assert lost, "no step's answer was lost: the test proves nothing"
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.failures) == (RunStatus.SUCCEEDED, 2, 0)
    assert handlers.step_calls == [1]
