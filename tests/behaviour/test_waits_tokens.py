"""Tokens, on every backend, with time moved by hand.

A token is a durable external decision: it stores exactly one (the first completion or
time-out wins, later ones are refused with a clear error) and stays readable. Waiting on
a token releases the worker; a token already decided returns at once. Completing it
resumes one small batch of linked runs at once, publishing their wakeups, without a
maintenance pass; maintenance resumes the rest in bounded batches, times out tokens past
their timeout and repairs a resume the decider missed. Every linked run is resumed once,
also when two maintenance passes overlap.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    InvalidPayloadError,
    ManualClock,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.runs import events_from_item, item_from_wire, run_from_wire
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenDecision, TokenNotFound, TokenStatus
from runlane_sqs.engine.maintenance import Maintenance
from runlane_sqs.engine.reports import JOB_TOKENS, JOB_WAITS, PassReport
from runlane_sqs.engine.resuming import RESUME_BATCH
from tests.backends import Backend
from tests.behaviour.waits_support import drain_all
from tests.behaviour.worker_support import drain, event_types, status
from tests.emulators import scan_items, wait_until
from tests.workers import WorkerKind

LINKED_RUNS = 60
"""More than one resume batch (25): the rest is left to maintenance."""
CONCURRENCY = 10
"""Attempts at once when many runs are drained (fewer round trips to the emulators)."""
TIMEOUT_SECONDS = 30.0


def stored_runs(
    backend: Backend, app: Runlane, ids: set[str]
) -> dict[str, tuple[Run, list[EventType]]]:
    """The runs ``ids`` with their event types. On the emulators one scan of the small test
    table (a test-side view, much cheaper than two reads per run over HTTP)."""
    if not backend.real:
        return {run_id: (app.runs.get(run_id), event_types(app, run_id)) for run_id in ids}
    found: dict[str, tuple[Run, list[EventType]]] = {}
    for wire in scan_items(backend.request.getfixturevalue("dynamodb"), app.config.table):
        if wire["sk"]["S"] == keys.RUN_SK and wire["run_id"]["S"] in ids:
            events = events_from_item(item_from_wire(wire))
            found[wire["run_id"]["S"]] = (run_from_wire(wire), [e.type for e in events])
    assert set(found) == ids
    return found


def statuses(backend: Backend, app: Runlane, ids: set[str]) -> Counter[RunStatus]:
    return Counter(run.status for run, _ in stored_runs(backend, app, ids).values())


class Handlers:
    """The tasks of this file; each notes what the test checks."""

    def __init__(self) -> None:
        self.resumed: list[str] = []
        """The run id each time code after a token wait ran."""
        self.starts: list[int] = []

    def resumed_counts(self) -> Counter[str]:
        return Counter(self.resumed)

    def token_waiter(self, ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_token(payload["token"])
        self.resumed.append(ctx.run_id)  # code after the wait runs once per run
        return {"status": result.status.value, "value": result.value}

    def approval(self, ctx: TaskContext, payload: Any) -> Any:
        self.starts.append(ctx.attempt)
        return ctx.wait_for_token(payload["token"]).value


def register(app: Runlane, handlers: Handlers) -> None:
    app.task(handlers.token_waiter, name="token-waiter")
    app.task(handlers.approval, name="approval")


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(backend: Backend, handlers: Handlers) -> Runlane:
    return backend.app(register=partial(register, handlers=handlers))


# deciding a token ----------------------------------------------------------------------


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
    for hostile in ("", "zz" * 16, "<b>" + "0" * 29, "0" * 31 + "\ud800", "0" * 33):
        with pytest.raises(TokenNotFound):  # never a KeyError, ValueError or botocore error
            app.tokens.complete(hostile, 1)
        with pytest.raises(TokenNotFound):
            app.tokens.time_out(hostile)


def test_token_metadata_and_decisions_must_be_json(app: Runlane) -> None:
    with pytest.raises(InvalidPayloadError):
        app.tokens.create(metadata={"x": object()})
    token = app.tokens.create()
    with pytest.raises(InvalidPayloadError):
        app.tokens.complete(token.id, {"at": object()})
    assert app.tokens.get(token.id).status is TokenStatus.PENDING


def test_a_second_completion_is_rejected_and_the_first_value_stays(app: Runlane) -> None:
    token = app.tokens.create(metadata={"for": "invoice-9"})
    app.tokens.complete(token.id, "first")
    with pytest.raises(TokenAlreadyDecided, match="already completed"):
        app.tokens.complete(token.id, "second")
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.time_out(token.id)
    stored = app.tokens.get(token.id)
    assert (stored.status, stored.value, stored.metadata) == (
        TokenStatus.COMPLETED,
        "first",
        {"for": "invoice-9"},
    )


def test_concurrent_completions_of_one_token_have_exactly_one_winner(
    app: Runlane, backend: Backend
) -> None:
    """Five completions at once. On the emulators each has its own app and clients, as
    separate processes would; in memory they share the one app that holds the storage."""
    others = [backend.app() for _ in range(4)] if backend.real else [app] * 4
    apps = [app, *others]
    token = app.tokens.create()
    barrier = threading.Barrier(len(apps))
    outcomes: dict[int, str] = {}

    def complete(n: int) -> None:
        barrier.wait()
        try:
            apps[n].tokens.complete(token.id, n)
            outcomes[n] = "won"
        except TokenAlreadyDecided:
            outcomes[n] = "rejected"

    threads = [threading.Thread(target=complete, args=(n,)) for n in range(len(apps))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT_SECONDS)
    winners = [n for n, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == len(apps)
    assert len(winners) == 1
    assert app.tokens.get(token.id).value == winners[0]


# waiting on a token --------------------------------------------------------------------


def test_waiting_on_an_already_completed_token_returns_at_once(app: Runlane) -> None:
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
    run = app.trigger("token-waiter", {"token": "f" * 32})
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.core.tokens.TokenNotFound"


def test_a_token_resumes_its_linked_runs_in_bounded_batches_each_once(
    app: Runlane, backend: Backend, clock: ManualClock, handlers: Handlers
) -> None:
    token = app.tokens.create(metadata={"approval": "budget"})
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * LINKED_RUNS)
    ids = {r.id for r in runs}
    assert drain_all(app, CONCURRENCY) == LINKED_RUNS
    assert statuses(backend, app, ids) == {RunStatus.RELEASED: LINKED_RUNS}
    for run in runs[:3]:
        waiting = app.runs.get(run.id).waiting
        assert waiting is not None
        assert (waiting.kind, waiting.target) == (WaitKind.TOKEN, token.id)

    decided = app.tokens.complete(token.id, {"approved_by": "alice"})
    assert decided.status is TokenStatus.COMPLETED
    # one small immediate resume pass: the first batch, and its wakeups are published
    assert statuses(backend, app, ids) == {
        RunStatus.QUEUED: RESUME_BATCH,
        RunStatus.RELEASED: LINKED_RUNS - RESUME_BATCH,
    }
    assert backend.depth(app) == RESUME_BATCH
    assert app.tokens.get(token.id).resuming is True

    passes = 0
    while RunStatus.RELEASED in statuses(backend, app, ids):
        passes += 1
        assert passes <= 10, "maintenance did not resume the remaining runs"
        report = app.maintenance.run_pass()
        assert report.jobs[JOB_TOKENS].examined >= 1 or report.jobs[JOB_WAITS].examined >= 1
        clock.advance(timedelta(minutes=1))
    assert app.tokens.get(token.id).resuming is False

    assert drain_all(app, CONCURRENCY) == LINKED_RUNS
    for run, types in stored_runs(backend, app, ids).values():
        assert run.status is RunStatus.SUCCEEDED
        assert run.result == {"status": "completed", "value": {"approved_by": "alice"}}
        assert run.attempt == 2
        assert types.count(EventType.TOKEN_COMPLETED) == 1
    assert handlers.resumed_counts() == dict.fromkeys(ids, 1)
    assert drain(app) == 0

    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, {"approved_by": "mallory"})
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.time_out(token.id)
    final = app.tokens.get(token.id)
    assert final.status is TokenStatus.COMPLETED
    assert final.value == {"approved_by": "alice"}


def test_a_token_timed_out_by_an_operator_resumes_its_runs_with_timed_out(
    app: Runlane,
) -> None:
    token = app.tokens.create()
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * 3)
    assert drain(app, concurrency=3) == 3
    assert app.tokens.time_out(token.id).status is TokenStatus.TIMED_OUT
    assert drain_all(app) == 3
    for run in runs:
        done = app.runs.get(run.id)
        assert done.result == {"status": "timed_out", "value": None}
        assert event_types(app, run.id).count(EventType.TOKEN_TIMED_OUT) == 1
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, "too late")


def test_a_token_past_its_timeout_is_timed_out_by_maintenance(
    app: Runlane, clock: ManualClock, handlers: Handlers
) -> None:
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
    assert EventType.TOKEN_TIMED_OUT in event_types(app, run.id)
    assert handlers.resumed_counts() == {run.id: 1}
    with pytest.raises(TokenAlreadyDecided):
        app.tokens.complete(token.id, "late")


def test_a_resume_the_decider_missed_is_made_by_maintenance(
    app: Runlane, clock: ManualClock
) -> None:
    """The token is decided but its immediate resume never happened (the decider died):
    the run is polled from the republish delay on and resumed."""
    token = app.tokens.create()
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1
    # decided in storage only, then taken off the agenda: nothing resumes the run
    app.store.tokens.decide_token(
        TokenDecision.of(token.id, TokenStatus.COMPLETED, "late", clock.now())
    )
    app.store.tokens.finish_token_resume(token.id)
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


def test_a_cancelled_waiter_is_not_resumed_by_its_token(app: Runlane) -> None:
    token = app.tokens.create()
    kept, cancelled = app.trigger_many("token-waiter", [{"token": token.id}] * 2)
    assert drain(app, concurrency=2) == 2
    app.runs.cancel(cancelled.id)
    app.tokens.complete(token.id, 1)
    assert drain_all(app) == 1
    assert status(app, kept.id) is RunStatus.SUCCEEDED
    assert status(app, cancelled.id) is RunStatus.CANCELLED
    assert EventType.TOKEN_COMPLETED not in event_types(app, cancelled.id)


# races and a live worker ---------------------------------------------------------------


def test_a_token_completed_just_before_its_waiter_releases_still_resumes_it(
    app: Runlane, handlers: Handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = app.tokens.create()
    get_token = app.store.tokens.get_token
    raced: list[str] = []

    def read_then_complete(token_id: str) -> Any:
        seen = get_token(token_id)
        if not raced:
            raced.append(token_id)
            app.tokens.complete(token_id, "raced")  # no waiter is released yet
        return seen

    monkeypatch.setattr(app.store.tokens, "get_token", read_then_complete)
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain_all(app) == 2
    assert app.runs.get(run.id).result == {"status": "completed", "value": "raced"}
    assert handlers.resumed_counts() == {run.id: 1}


def test_two_overlapping_maintenance_passes_resume_each_waiter_once(
    app: Runlane, backend: Backend, clock: ManualClock, handlers: Handlers
) -> None:
    token = app.tokens.create()
    runs = app.trigger_many("token-waiter", [{"token": token.id}] * 60)
    ids = {r.id for r in runs}
    assert drain_all(app, CONCURRENCY) == 60
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
        thread.join(timeout=TIMEOUT_SECONDS)
    assert errors == []
    assert drain_all(app, CONCURRENCY) == 60
    for run, types in stored_runs(backend, app, ids).values():
        assert run.status is RunStatus.SUCCEEDED
        assert types.count(EventType.TOKEN_COMPLETED) == 1
    assert handlers.resumed_counts() == dict.fromkeys(ids, 1)


def test_a_token_completion_reaches_an_idle_worker_without_a_maintenance_pass(
    app: Runlane,
    worker_kind: WorkerKind,
    handlers: Handlers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker runs in a background thread, idle between receives: the completion must
    reach it through the wakeups the completion publishes, with no maintenance pass."""

    def no_pass(self: Maintenance, **_: Any) -> PassReport:
        raise AssertionError("this test runs no maintenance pass")

    monkeypatch.setattr(Maintenance, "run_pass", no_pass)
    token = app.tokens.create()
    with worker_kind.running(app, concurrency=4):
        run = app.trigger("approval", {"token": token.id})
        wait_until(
            lambda: status(app, run.id) is RunStatus.RELEASED, TIMEOUT_SECONDS, "the release"
        )
        app.tokens.complete(token.id, {"approved": "yes"})
        wait_until(
            lambda: status(app, run.id) is RunStatus.SUCCEEDED,
            TIMEOUT_SECONDS,
            "the resumed run to succeed",
        )
    assert handlers.starts == [1, 2]
    done = app.runs.get(run.id)
    assert done.result == {"approved": "yes"}
    assert (done.attempt, done.failures) == (2, 0)


# how DynamoDB holds them ---------------------------------------------------------------


def test_a_run_waiting_on_a_token_is_on_the_waits_index_under_the_token(
    make_app: Callable[..., Runlane], clock: ManualClock, dynamodb: Any
) -> None:
    """Emulators only: reads the raw DynamoDB item of a run waiting on a token."""
    app = make_app(clock=clock)
    register(app, Handlers())
    app.provision()
    token = app.tokens.create()
    run = app.trigger("token-waiter", {"token": token.id})
    assert drain(app) == 1
    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run.id),
        ConsistentRead=True,
    )["Item"]
    assert item["status"]["S"] == RunStatus.RELEASED.value
    assert item["wait_pk"]["S"] == keys.wait_pk(app.config.environment, "token", token.id)
