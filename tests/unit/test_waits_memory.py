"""Waits without failing through the whole app, in memory, with time moved by hand.

Semantics 6 to 8 and 12: a release costs no retry and is not run before its time; a
durable step's side effect happens once; a signal wakes only current waiters; a token
is decided once and resumes its linked runs in bounded batches (the rest by
maintenance); ``wait_for_run`` returns the other run's outcome.

``run.attempt`` counts every start (a release ends an attempt too); the retry policy
counts ``run.failures`` only, so waiting never uses up retries.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from runlane_sqs import (
    ConfigurationError,
    EventType,
    InvalidKeyError,
    InvalidPayloadError,
    RetryPolicy,
    Runlane,
    RunNotFound,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenNotFound, TokenStatus
from runlane_sqs.core.tokens import decide as decide_token
from runlane_sqs.engine.context import RunOutcome, StepError
from runlane_sqs.engine.maintenance import JOB_DUE, JOB_TOKENS, JOB_WAITS, PassReport
from runlane_sqs.engine.resuming import RESUME_BATCH
from runlane_sqs.testing import ManualClock, in_memory_app

QUEUE = "default"
T = TypeVar("T")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    return in_memory_app(clock=clock)


def side_effect(calls: list[int], attempt: int, value: T) -> T:
    """A step body: note the attempt that ran it, return ``value``."""
    calls.append(attempt)
    return value


def transport(app: Runlane) -> InMemoryTransport:
    assert isinstance(app.transport, InMemoryTransport)
    return app.transport


def drain(app: Runlane) -> int:
    return app.worker().drain()


def drain_all(app: Runlane) -> int:
    """Drain until a drain executes nothing (resumes publish new wakeups while draining)."""
    total = 0
    while executed := drain(app):
        total += executed
    return total


def published(report: PassReport) -> int:
    return sum(job.published for job in report.jobs.values())


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def status(app: Runlane, run_id: str) -> RunStatus:
    return app.runs.get(run_id).status


# release until a time ------------------------------------------------------------------


def test_a_release_three_hours_ahead_is_not_run_early_and_costs_no_retry(
    app: Runlane, clock: ManualClock
) -> None:
    starts: list[int] = []

    @app.task(name="later", retry=RetryPolicy(max_attempts=1))
    def later(ctx: TaskContext, payload: Any) -> Any:
        starts.append(ctx.attempt)
        if ctx.attempt == 1:  # the next attempt starts the handler from the beginning
            ctx.release(delay=timedelta(hours=3))
        return "done"

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

    assert drain(app) == 0
    clock.advance(timedelta(hours=2, minutes=59, seconds=59))
    report = app.maintenance.run_pass()
    assert published(report) == 0
    assert transport(app).depth(QUEUE) == 0
    assert drain(app) == 0
    assert starts == [1]

    clock.advance(1)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    assert starts == [1, 2]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == "done"
    # attempt counts every start; the retry policy (max_attempts=1) counts failures only
    assert done.attempt == 2
    assert done.failures == 0
    assert done.failure is None
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


def test_a_short_release_is_published_at_once_with_a_delay(
    app: Runlane, clock: ManualClock
) -> None:
    starts: list[int] = []

    @app.task(name="soon")
    def soon(ctx: TaskContext, payload: Any) -> None:
        starts.append(ctx.attempt)
        if ctx.attempt == 1:
            ctx.release(delay=30)

    run = app.trigger("soon")
    assert drain(app) == 1
    assert transport(app).depth(QUEUE) == 1
    clock.advance(29)
    assert drain(app) == 0
    clock.advance(1)
    assert drain(app) == 1
    assert starts == [1, 2]
    assert status(app, run.id) is RunStatus.SUCCEEDED


def test_release_needs_exactly_one_of_delay_and_until(app: Runlane) -> None:
    @app.task(name="bad-release")
    def bad(ctx: TaskContext, payload: Any) -> None:
        ctx.release()

    run = app.trigger("bad-release")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.errors.ConfigurationError"


def test_a_released_run_released_twice_then_failing_still_gets_its_retry(
    app: Runlane, clock: ManualClock
) -> None:
    attempts: list[int] = []

    @app.task(name="patient", retry=RetryPolicy(max_attempts=2, delay=0, backoff="fixed"))
    def patient(ctx: TaskContext, payload: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt <= 2:
            ctx.release(delay=0)
        if ctx.attempt == 3:
            raise RuntimeError("flaky")
        return "ok"

    run = app.trigger("patient")
    assert drain_all(app) == 4
    assert attempts == [1, 2, 3, 4]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert (done.attempt, done.failures) == (4, 1)
    types = event_types(app, run.id)
    assert types.count(EventType.RELEASED) == 2
    assert types.count(EventType.ATTEMPT_FAILED) == 1


def test_except_exception_in_a_handler_does_not_swallow_a_wait(app: Runlane) -> None:
    swallowed: list[BaseException] = []

    @app.task(name="careless")
    def careless(ctx: TaskContext, payload: Any) -> str:
        try:
            ctx.wait_for_signal("careless-key")
        except Exception as exc:
            swallowed.append(exc)
            return "swallowed"
        return "received"

    run = app.trigger("careless")
    assert drain(app) == 1
    assert swallowed == []
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.RELEASED
    assert stored.failure is None


# durable steps -------------------------------------------------------------------------


def test_a_step_side_effect_happens_once_and_its_value_is_replayed_after_a_release(
    app: Runlane, clock: ManualClock
) -> None:
    charges: list[str] = []
    seen: list[Any] = []

    def charge(run_id: str) -> dict[str, Any]:
        charges.append(run_id)
        return {"charge_id": f"ch-{len(charges)}", "amount": 42}

    @app.task(name="checkout")
    def checkout(ctx: TaskContext, payload: Any) -> Any:
        receipt = ctx.step("charge", lambda: charge(ctx.run_id))
        seen.append(receipt)
        if ctx.attempt == 1:
            ctx.release(delay=timedelta(hours=3))
        return receipt

    run = app.trigger("checkout")
    assert drain(app) == 1
    after_first = app.runs.get(run.id)
    assert after_first.steps["charge"]["value"] == {"charge_id": "ch-1", "amount": 42}
    clock.advance(timedelta(hours=3))
    app.maintenance.run_pass()
    assert drain(app) == 1

    assert charges == [run.id]
    assert seen == [{"charge_id": "ch-1", "amount": 42}] * 2
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"charge_id": "ch-1", "amount": 42}
    assert event_types(app, run.id).count(EventType.STEP_RECORDED) == 1


def test_a_step_recorded_before_a_failure_is_replayed_by_the_retry(app: Runlane) -> None:
    calls: list[int] = []

    @app.task(name="retrying", retry=RetryPolicy(max_attempts=2, delay=0, backoff="fixed"))
    def retrying(ctx: TaskContext, payload: Any) -> Any:
        value = ctx.step("once", lambda: side_effect(calls, ctx.attempt, ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("after the step")
        return value

    run = app.trigger("retrying")
    assert drain_all(app) == 2
    assert calls == [1]
    assert app.runs.get(run.id).result == 1


def test_a_step_name_used_twice_in_one_attempt_fails_the_attempt(app: Runlane) -> None:
    calls: list[str] = []

    @app.task(name="twice")
    def twice(ctx: TaskContext, payload: Any) -> None:
        ctx.step("same", lambda: calls.append("first"))
        ctx.step("same", lambda: calls.append("second"))

    run = app.trigger("twice")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.errors.StepError"
    assert "twice in one attempt" in failed.failure.message
    assert calls == ["first"]


def place_one(ctx: TaskContext) -> Any:
    return ctx.step("shared", lambda: "from place one")


def place_two(ctx: TaskContext) -> Any:
    return ctx.step("shared", lambda: "from place two")


def test_a_step_name_reused_from_another_function_on_a_later_attempt_fails(
    app: Runlane, clock: ManualClock
) -> None:
    @app.task(name="moved")
    def moved(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            place_one(ctx)
            ctx.release(delay=1)
        return place_two(ctx)

    run = app.trigger("moved")
    assert drain(app) == 1
    clock.advance(1)
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == f"{StepError.__module__}.{StepError.__qualname__}"
    assert "place_one" in failed.failure.message
    assert "place_two" in failed.failure.message


def test_a_step_result_that_is_not_json_fails_the_attempt_and_is_not_recorded(
    app: Runlane,
) -> None:
    @app.task(name="opaque")
    def opaque(ctx: TaskContext, payload: Any) -> Any:
        return ctx.step("thing", lambda: {"when": object()})

    run = app.trigger("opaque")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == (
        f"{InvalidPayloadError.__module__}.{InvalidPayloadError.__qualname__}"
    )
    assert "step 'thing'" in failed.failure.message
    assert failed.steps == {}
    assert EventType.STEP_RECORDED not in event_types(app, run.id)


def test_an_async_handler_can_step_and_wait(app: Runlane, clock: ManualClock) -> None:
    calls: list[int] = []

    @app.task(name="async-waiter")
    async def waiter(ctx: TaskContext, payload: Any) -> Any:
        value = ctx.step("once", lambda: side_effect(calls, ctx.attempt, "stepped"))
        signal = ctx.wait_for_signal("async-key")
        return {"step": value, "signal": signal.payload}

    run = app.trigger("async-waiter")
    assert drain(app) == 1
    assert status(app, run.id) is RunStatus.RELEASED
    assert app.signals.send("async-key", 9) == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"step": "stepped", "signal": 9}
    assert calls == [1]


# signals -------------------------------------------------------------------------------


def register_signal_waiter(app: Runlane, seen: list[tuple[str, Any]]) -> None:
    @app.task(name="signal-waiter")
    def waiter(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal(payload["key"])
        seen.append((ctx.run_id, result.payload))
        return {"status": result.status, "payload": result.payload}


def test_a_signal_sent_before_anyone_waits_is_not_kept_for_a_later_waiter(
    app: Runlane, clock: ManualClock
) -> None:
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
    assert app.signals.send("early", {"n": 1}) == 0

    run = app.trigger("signal-waiter", {"key": "early"})
    assert drain(app) == 1
    waiting = app.runs.get(run.id)
    assert waiting.status is RunStatus.RELEASED
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        app.maintenance.run_pass()
        assert drain(app) == 0
    assert status(app, run.id) is RunStatus.RELEASED
    assert seen == []

    assert app.signals.send("early", {"n": 2}) == 1
    assert drain(app) == 1
    assert seen == [(run.id, {"n": 2})]


def test_a_signal_wakes_every_current_waiter_with_its_payload(app: Runlane) -> None:
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
    runs = [app.trigger("signal-waiter", {"key": "go"}) for _ in range(3)]
    bystander = app.trigger("signal-waiter", {"key": "other"})
    assert drain(app) == 4

    assert app.signals.send("go", {"approved": True}) == 3
    assert {status(app, r.id) for r in runs} == {RunStatus.QUEUED}
    assert drain(app) == 3
    assert sorted(seen) == sorted((r.id, {"approved": True}) for r in runs)
    for run in runs:
        done = app.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED
        assert done.result == {"status": "received", "payload": {"approved": True}}
        types = event_types(app, run.id)
        assert types.count(EventType.SIGNAL_RECEIVED) == 1
        received = next(e for e in app.runs.events(run.id) if e.type is EventType.SIGNAL_RECEIVED)
        assert received.data == {"key": "go"}
    assert status(app, bystander.id) is RunStatus.RELEASED
    assert app.signals.send("go", "again") == 0


def test_a_run_that_starts_waiting_after_the_signal_keeps_waiting(
    app: Runlane, clock: ManualClock
) -> None:
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
    first = app.trigger("signal-waiter", {"key": "k"})
    assert drain(app) == 1
    assert app.signals.send("k", "first") == 1
    late = app.trigger("signal-waiter", {"key": "k"})
    assert drain_all(app) == 2
    assert status(app, first.id) is RunStatus.SUCCEEDED
    assert status(app, late.id) is RunStatus.RELEASED
    clock.advance(timedelta(days=1))
    app.maintenance.run_pass()
    assert drain(app) == 0
    assert seen == [(first.id, "first")]
    assert app.signals.send("k", "second") == 1
    assert drain(app) == 1
    assert app.runs.get(late.id).result == {"status": "received", "payload": "second"}


def test_two_waits_on_the_same_key_are_told_apart(app: Runlane) -> None:
    @app.task(name="two-step")
    def two_step(ctx: TaskContext, payload: Any) -> Any:
        first = ctx.wait_for_signal("stage")
        second = ctx.wait_for_signal("stage")
        return [first.payload, second.payload]

    run = app.trigger("two-step")
    assert drain(app) == 1
    assert app.signals.send("stage", "one") == 1
    assert drain(app) == 1
    assert status(app, run.id) is RunStatus.RELEASED
    assert app.signals.send("stage", "two") == 1
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.result == ["one", "two"]
    assert done.attempt == 3
    assert done.failures == 0


def test_a_signal_wait_times_out_after_its_timeout_through_a_pass(
    app: Runlane, clock: ManualClock
) -> None:
    @app.task(name="impatient")
    def impatient(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal("never", timeout=timedelta(minutes=30))
        return {"status": result.status, "received": result.received, "payload": result.payload}

    run = app.trigger("impatient")
    assert drain(app) == 1
    waiting = app.runs.get(run.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.due_at == clock.now() + timedelta(minutes=30)

    clock.advance(timedelta(minutes=29))
    assert published(app.maintenance.run_pass()) == 0
    assert drain(app) == 0
    clock.advance(timedelta(minutes=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"status": "timed_out", "received": False, "payload": None}
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.RELEASED,
        EventType.WAIT_TIMED_OUT,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert app.signals.send("never", 1) == 0


def test_a_signal_before_the_timeout_wins_over_it(app: Runlane, clock: ManualClock) -> None:
    @app.task(name="in-time")
    def in_time(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal("soon", timeout=timedelta(minutes=30)).status

    run = app.trigger("in-time")
    assert drain(app) == 1
    clock.advance(timedelta(minutes=10))
    assert app.signals.send("soon") == 1
    clock.advance(timedelta(hours=1))
    app.maintenance.run_pass()
    assert drain_all(app) == 1
    assert app.runs.get(run.id).result == "received"
    assert EventType.WAIT_TIMED_OUT not in event_types(app, run.id)


# tokens --------------------------------------------------------------------------------


def test_a_token_is_created_pending_with_an_unguessable_id_and_readable(app: Runlane) -> None:
    token = app.tokens.create(metadata={"invoice": 7}, timeout=timedelta(days=2))
    other = app.tokens.create()
    assert len(token.id) == 32
    assert int(token.id, 16) >= 0
    assert token.id != other.id
    read = app.tokens.get(token.id)
    assert read.status is TokenStatus.PENDING
    assert read.metadata == {"invoice": 7}
    assert read.timeout_at == token.created_at + timedelta(days=2)
    assert other.timeout_at is None
    with pytest.raises(TokenNotFound):
        app.tokens.get("0" * 32)
    with pytest.raises(TokenNotFound):
        app.tokens.complete("0" * 32, 1)


def test_token_metadata_must_be_json(app: Runlane) -> None:
    with pytest.raises(InvalidPayloadError):
        app.tokens.create(metadata={"x": object()})


def register_token_waiter(app: Runlane, resumed: Counter[str]) -> None:
    @app.task(name="token-waiter")
    def waiter(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_token(payload["token"])
        resumed[ctx.run_id] += 1  # code after the wait runs once per run
        return {"status": result.status.value, "value": result.value}


def test_waiting_on_an_already_completed_token_returns_at_once(app: Runlane) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    app.tokens.complete(token.id, {"approved": True})
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"status": "completed", "value": {"approved": True}}
    assert done.attempt == 1
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_waiting_on_an_unknown_token_fails_the_attempt(app: Runlane) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    run = app.trigger("token-waiter", {"token": "f" * 32})
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.core.tokens.TokenNotFound"


def test_a_token_resumes_120_linked_runs_in_bounded_batches_each_once(
    app: Runlane, clock: ManualClock
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create(metadata={"batch": True})
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * 120)
    assert drain_all(app) == 120
    assert {status(app, r.id) for r in runs} == {RunStatus.RELEASED}
    for run in runs[:3]:
        waiting = app.runs.get(run.id).waiting
        assert waiting is not None
        assert (waiting.kind, waiting.target) == (WaitKind.TOKEN, token.id)

    decided = app.tokens.complete(token.id, {"approved_by": "alice"})
    assert decided.status is TokenStatus.COMPLETED
    # one small immediate resume pass: the first batch, and its wakeups are published
    statuses = Counter(status(app, r.id) for r in runs)
    assert statuses == {RunStatus.QUEUED: RESUME_BATCH, RunStatus.RELEASED: 120 - RESUME_BATCH}
    assert transport(app).depth(QUEUE) == RESUME_BATCH
    assert app.tokens.get(token.id).resuming is True

    passes = 0
    while any(status(app, r.id) is RunStatus.RELEASED for r in runs):
        passes += 1
        assert passes <= 10, "maintenance did not resume the remaining runs"
        report = app.maintenance.run_pass()
        assert report.jobs[JOB_TOKENS].examined >= 1 or report.jobs[JOB_WAITS].examined >= 1
        clock.advance(timedelta(minutes=1))
    assert app.tokens.get(token.id).resuming is False

    assert drain_all(app) == 120
    for run in runs:
        done = app.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED
        assert done.result == {"status": "completed", "value": {"approved_by": "alice"}}
        assert done.attempt == 2
        assert event_types(app, run.id).count(EventType.TOKEN_COMPLETED) == 1
    assert resumed == dict.fromkeys((r.id for r in runs), 1)
    assert drain(app) == 0

    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, {"approved_by": "mallory"})
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.time_out(token.id)
    final = app.tokens.get(token.id)
    assert final.status is TokenStatus.COMPLETED
    assert final.value == {"approved_by": "alice"}


def test_a_second_completion_is_rejected_and_the_first_value_stays(app: Runlane) -> None:
    token = app.tokens.create()
    app.tokens.complete(token.id, "first")
    with pytest.raises(TokenAlreadyDecided, match="already completed"):
        app.tokens.complete(token.id, "second")
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.time_out(token.id)
    assert app.tokens.get(token.id).value == "first"


def test_a_token_timed_out_by_an_operator_resumes_its_runs_with_timed_out(
    app: Runlane,
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * 3)
    assert drain(app) == 3
    assert app.tokens.time_out(token.id).status is TokenStatus.TIMED_OUT
    assert drain_all(app) == 3
    for run in runs:
        done = app.runs.get(run.id)
        assert done.result == {"status": "timed_out", "value": None}
        assert event_types(app, run.id).count(EventType.TOKEN_TIMED_OUT) == 1
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, "too late")


def test_a_token_past_its_timeout_is_timed_out_by_maintenance(
    app: Runlane, clock: ManualClock
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create(timeout=timedelta(hours=1))
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1

    clock.advance(timedelta(minutes=59))
    app.maintenance.run_pass()
    assert app.tokens.get(token.id).status is TokenStatus.PENDING
    assert status(app, run.id) is RunStatus.RELEASED
    assert drain(app) == 0

    clock.advance(timedelta(minutes=1))
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_TOKENS].acted == 1
    assert app.tokens.get(token.id).status is TokenStatus.TIMED_OUT
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"status": "timed_out", "value": None}
    assert resumed[run.id] == 1
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, "late")


def test_a_resume_the_decider_missed_is_made_by_maintenance(
    app: Runlane, clock: ManualClock
) -> None:
    """The token is decided but its immediate resume never happened (the decider died):
    the run is polled from the republish delay on and resumed."""
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1
    # decided in storage only, then taken off the agenda: nothing resumes the run
    app.store.decide_token(
        decide_token(app.tokens.get(token.id), TokenStatus.COMPLETED, "late", clock.now())
    )
    app.store.finish_token_resume(token.id)
    app.maintenance.run_pass()
    assert status(app, run.id) is RunStatus.RELEASED

    clock.advance(app.config.republish.after)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_WAITS].acted == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"status": "completed", "value": "late"}


def test_a_run_waiting_on_a_pending_token_is_polled_with_backoff(
    app: Runlane, clock: ManualClock
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1
    before = app.runs.get(run.id)
    assert before.wake_at == clock.now() + app.config.republish.after

    clock.advance(app.config.republish.after)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_WAITS].examined == 1
    assert report.jobs[JOB_WAITS].acted == 0
    polled = app.runs.get(run.id)
    assert polled.status is RunStatus.RELEASED
    assert polled.wake_at == clock.now() + 2 * app.config.republish.after
    assert polled.seq == before.seq  # a poll appends no event
    assert drain(app) == 0


# waiting for another run ---------------------------------------------------------------


def register_parent_and_child(app: Runlane) -> None:
    @app.task(name="child")
    def child(ctx: TaskContext, payload: Any) -> Any:
        ctx.wait_for_signal(f"go-{ctx.run_id}")
        if payload.get("fail"):
            raise ValueError("child broke")
        return {"child": "done"}

    @app.task(name="parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        outcome = ctx.wait_for_run(payload["child"])
        assert isinstance(outcome, RunOutcome)
        return outcome.to_json()


def parent_waiting_on_child(app: Runlane, fail: bool) -> tuple[Run, Run]:
    register_parent_and_child(app)
    child = app.trigger("child", {"fail": fail})
    parent = app.trigger("parent", {"child": child.id})
    assert drain(app) == 2
    waiting = app.runs.get(parent.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.RUN, child.id)
    return parent, child


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
    resumed = [e for e in app.runs.events(parent.id) if e.type is EventType.RESUMED]
    assert [e.data for e in resumed] == [{"run": child.id, "status": "succeeded"}]


def test_wait_for_run_resumes_the_parent_when_the_child_fails(app: Runlane) -> None:
    parent, child = parent_waiting_on_child(app, fail=True)
    assert app.signals.send(f"go-{child.id}") == 1
    assert drain_all(app) == 2
    assert status(app, child.id) is RunStatus.FAILED
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result["status"] == "failed"
    assert done.result["result"] is None
    assert done.result["failure"]["type"] == "builtins.ValueError"
    assert done.result["failure"]["message"] == "child broke"


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

    @app.task(name="child")
    def child(ctx: TaskContext, payload: Any) -> Any:
        ctx.wait_for_signal(f"go-{ctx.run_id}")
        app.runs.cancel(ctx.run_id, reason="operator changed their mind")
        return "finished anyway"

    @app.task(name="parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(payload["child"]).to_json()

    child_run = app.trigger("child")
    parent_run = app.trigger("parent", {"child": child_run.id})
    assert drain(app) == 2
    assert app.signals.send(f"go-{child_run.id}") == 1
    drain_all(app)
    assert status(app, child_run.id) is RunStatus.CANCELLED
    done = app.runs.get(parent_run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result["status"] == "cancelled"


def test_wait_for_a_finished_run_returns_at_once(app: Runlane) -> None:
    @app.task(name="quick")
    def quick(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name="parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(payload["child"]).to_json()

    child = app.trigger("quick", 5)
    assert drain(app) == 1
    parent_run = app.trigger("parent", {"child": child.id})
    assert drain(app) == 1
    done = app.runs.get(parent_run.id)
    assert done.attempt == 1
    assert done.result == {"run_id": child.id, "status": "succeeded", "result": 5, "failure": None}


def test_wait_for_an_unknown_run_fails_the_attempt_with_run_not_found(app: Runlane) -> None:
    @app.task(name="parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run("0" * 32).to_json()

    run = app.trigger("parent")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == f"{RunNotFound.__module__}.{RunNotFound.__qualname__}"


def test_a_run_cannot_wait_for_itself(app: Runlane) -> None:
    @app.task(name="narcissus")
    def narcissus(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(ctx.run_id)

    run = app.trigger("narcissus")
    assert drain(app) == 1
    failure = app.runs.get(run.id).failure
    assert failure is not None
    assert failure.type == f"{ConfigurationError.__module__}.{ConfigurationError.__qualname__}"


# operators -----------------------------------------------------------------------------


def test_cancelling_a_released_run_cancels_it_at_once(app: Runlane, clock: ManualClock) -> None:
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
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
    assert seen == []


def test_runs_get_shows_what_a_released_run_waits_for(app: Runlane, clock: ManualClock) -> None:
    token = app.tokens.create()

    @app.task(name="waits")
    def waits_for(ctx: TaskContext, payload: Any) -> Any:
        kind = payload["kind"]
        if kind == "signal":
            ctx.wait_for_signal("approval", timeout=60)
        elif kind == "token":
            ctx.wait_for_token(token.id)
        elif kind == "run":
            ctx.wait_for_run(payload["other"])
        else:
            ctx.release(delay=timedelta(days=2))

    by_signal = app.trigger("waits", {"kind": "signal"})
    by_token = app.trigger("waits", {"kind": "token"})
    by_run = app.trigger("waits", {"kind": "run", "other": by_token.id})
    by_time = app.trigger("waits", {"kind": "time"})
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


def test_a_run_finishing_just_before_its_waiter_releases_still_resumes_it(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child ends between the parent's look at it and the parent's release write:
    the child's own resume finds no waiter, so the parent's worker looks once more."""
    register_parent_and_child(app)
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


def test_a_token_completed_just_before_its_waiter_releases_still_resumes_it(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    get_token = app.store.get_token
    raced: list[str] = []

    def read_then_complete(token_id: str) -> Any:
        seen = get_token(token_id)
        if not raced:
            raced.append(token_id)
            app.tokens.complete(token_id, "raced")  # no waiter is released yet
        return seen

    monkeypatch.setattr(app.store, "get_token", read_then_complete)
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain_all(app) == 2
    assert app.runs.get(run.id).result == {"status": "completed", "value": "raced"}
    assert resumed[run.id] == 1


def test_a_cancelled_waiter_is_not_resumed_by_its_token(app: Runlane) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    kept, cancelled = app.trigger_many("token-waiter", [{"token": token.id}] * 2)
    assert drain(app) == 2
    app.runs.cancel(cancelled.id)
    app.tokens.complete(token.id, 1)
    assert drain_all(app) == 1
    assert status(app, kept.id) is RunStatus.SUCCEEDED
    assert status(app, cancelled.id) is RunStatus.CANCELLED
    assert EventType.TOKEN_COMPLETED not in event_types(app, cancelled.id)


def test_decisions_and_signals_must_be_json(app: Runlane) -> None:
    token = app.tokens.create()
    with pytest.raises(InvalidPayloadError):
        app.tokens.complete(token.id, {"at": object()})
    assert app.tokens.get(token.id).status is TokenStatus.PENDING
    with pytest.raises(InvalidPayloadError):
        app.signals.send("key", float("nan"))
    with pytest.raises(InvalidKeyError):
        app.signals.send("  ")


def test_concurrent_completions_of_one_token_have_exactly_one_winner(app: Runlane) -> None:
    token = app.tokens.create()
    barrier = threading.Barrier(5)
    outcomes: dict[int, str] = {}

    def complete(n: int) -> None:
        barrier.wait()
        try:
            app.tokens.complete(token.id, n)
            outcomes[n] = "won"
        except TokenAlreadyDecided:
            outcomes[n] = "rejected"

    threads = [threading.Thread(target=complete, args=(n,)) for n in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    winners = [n for n, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == 5
    assert len(winners) == 1
    assert app.tokens.get(token.id).value == winners[0]


def test_two_overlapping_maintenance_passes_resume_each_waiter_once(
    app: Runlane, clock: ManualClock
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed)
    token = app.tokens.create()
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * 60)
    assert drain_all(app) == 60
    app.tokens.complete(token.id, "go")
    clock.advance(app.config.republish.after)  # the wait checks look at every waiter too
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run_pass() -> None:
        barrier.wait()
        try:
            app.maintenance.run_pass()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert drain_all(app) == 60
    for run in runs:
        assert status(app, run.id) is RunStatus.SUCCEEDED
        assert event_types(app, run.id).count(EventType.TOKEN_COMPLETED) == 1
    assert resumed == dict.fromkeys((r.id for r in runs), 1)


def test_a_step_returns_the_same_value_when_recorded_and_when_replayed(
    app: Runlane, clock: ManualClock
) -> None:
    """``fn``'s result is stored as JSON; the attempt that records it must see what later
    attempts will see, or code after the step behaves differently after a resume
    (a tuple comes back as a list, integer keys as strings)."""
    seen: list[Any] = []

    @app.task(name="shapes")
    def shapes(ctx: TaskContext, payload: Any) -> None:
        seen.append(ctx.step("lookup", lambda: {1: ("a", "b")}))
        if ctx.attempt == 1:
            ctx.release(delay=1)

    app.trigger("shapes")
    assert drain(app) == 1
    clock.advance(1)
    assert drain(app) == 1
    assert len(seen) == 2
    assert seen[0] == seen[1], f"recording attempt saw {seen[0]!r}, the replay {seen[1]!r}"
