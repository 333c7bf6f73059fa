"""Waits without failing on DynamoDB and SQS (semantics 6 to 8 and 12), over HTTP.

Time is moved by hand (``ManualClock``) except in the test that runs a real worker in a
background thread: there a token completion must reach the idle worker through the
wakeups the completion publishes, with no maintenance pass at all.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from runlane_sqs import EventType, ManualClock, Runlane, RunStatus, TaskContext, Worker
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import events_from_item, item_from_wire, run_from_wire
from runlane_sqs.core.model import Run, RunEvent, WaitKind
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenStatus
from runlane_sqs.engine.maintenance import JOB_DUE, Maintenance, PassReport
from runlane_sqs.engine.resuming import RESUME_BATCH
from tests.integration.conftest import queue_counts, queue_url, scan_items, wait_until

START = datetime(2030, 1, 1, tzinfo=UTC)
T = TypeVar("T")
LINKED_RUNS = 120
WORKERS = 10
TIMEOUT_SECONDS = 30.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    return make_app(clock=clock)


def side_effect(calls: list[int], attempt: int, value: T) -> T:
    """A step body: note the attempt that ran it, return ``value``."""
    calls.append(attempt)
    return value


def drain(app: Runlane, concurrency: int = 1) -> int:
    return app.worker(concurrency=concurrency).drain()


def drain_all(app: Runlane, concurrency: int = 1) -> int:
    total = 0
    while executed := drain(app, concurrency):
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


def raw_run_item(dynamodb: Any, app: Runlane, run_id: str) -> dict[str, Any]:
    response = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run_id),
        ConsistentRead=True,
    )
    item: dict[str, Any] = response["Item"]
    return item


def stored_runs(
    dynamodb: Any, app: Runlane, ids: set[str]
) -> dict[str, tuple[Run, list[RunEvent]]]:
    """The runs ``ids`` and their histories, read with one scan of the small test table
    (a test-side view, much cheaper than a read per run on the moto server)."""
    found: dict[str, tuple[Run, list[RunEvent]]] = {}
    for wire in scan_items(dynamodb, app.config.table):
        if wire["sk"]["S"] != keys.RUN_SK or wire["run_id"]["S"] not in ids:
            continue
        found[wire["run_id"]["S"]] = (run_from_wire(wire), events_from_item(item_from_wire(wire)))
    assert set(found) == ids
    return found


def statuses(dynamodb: Any, app: Runlane, ids: set[str]) -> Counter[RunStatus]:
    """How many of the runs ``ids`` are in each status (one scan of two attributes)."""
    found: dict[str, RunStatus] = {}
    request: dict[str, Any] = {
        "TableName": app.config.table,
        "ConsistentRead": True,
        "ProjectionExpression": "sk, run_id, #status",
        "ExpressionAttributeNames": {"#status": "status"},
    }
    while True:
        page = dynamodb.scan(**request)
        for item in page.get("Items", []):
            if item["sk"]["S"] == keys.RUN_SK and item["run_id"]["S"] in ids:
                found[item["run_id"]["S"]] = RunStatus(item["status"]["S"])
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert set(found) == ids
    return Counter(found.values())


# release and durable steps ---------------------------------------------------------------


def test_a_three_hour_release_runs_after_its_time_and_a_step_runs_once(
    app: Runlane, clock: ManualClock, dynamodb: Any, sqs: Any
) -> None:
    charges: list[int] = []

    @app.task(name="waits.checkout")
    def checkout(ctx: TaskContext, payload: Any) -> Any:
        receipt = ctx.step("charge", lambda: side_effect(charges, ctx.attempt, {"charge": "ch-1"}))
        if ctx.attempt == 1:
            ctx.release(delay=timedelta(hours=3))
        return receipt

    app.provision()
    url = queue_url(sqs, app)
    run = app.trigger("waits.checkout", {"order": 7})
    assert drain(app) == 1
    released = app.runs.get(run.id)
    assert released.status is RunStatus.RELEASED
    assert released.due_at == START + timedelta(hours=3)
    assert released.waiting is not None
    assert released.waiting.kind is WaitKind.TIME
    assert (released.failures, released.failure, released.lease) == (0, None, None)
    item = raw_run_item(dynamodb, app, run.id)
    assert json.loads(item["steps"]["M"]["charge"]["S"])["value"] == {"charge": "ch-1"}
    assert "wait_pk" not in item  # time waits are not on the waits index
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}

    clock.advance(timedelta(hours=2, minutes=59))
    assert published(app.maintenance.run_pass()) == 0
    assert drain(app) == 0
    clock.advance(timedelta(minutes=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert drain(app) == 1

    assert charges == [1]
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"charge": "ch-1"}
    assert (done.attempt, done.failures, done.failure) == (2, 0, None)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.STEP_RECORDED,
        EventType.RELEASED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_step_name_with_brackets_is_recorded_like_any_other(app: Runlane) -> None:
    """Step names are free text (1 to 128 characters). Storage writes each step into the
    ``steps`` map by document path, so the name must be passed as one map key."""
    calls: list[int] = []

    @app.task(name="waits.bracketed-step")
    def bracketed(ctx: TaskContext, payload: Any) -> Any:
        return ctx.step("line_items[0]", lambda: side_effect(calls, ctx.attempt, "first item"))

    app.provision()
    run = app.trigger("waits.bracketed-step")
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.failure is None, done.failure.message if done.failure else ""
    assert done.status is RunStatus.SUCCEEDED
    assert done.steps["line_items[0]"]["value"] == "first item"


def test_steps_that_outgrow_the_run_item_fail_the_run_instead_of_wedging_it(
    app: Runlane,
) -> None:
    """Each step value is within the payload limit (64 KB), but steps accumulate in the run's
    one DynamoDB item (400 KB at most, shared with payload and history). When the next
    step cannot fit, the attempt must end with a recorded failure: a run whose item is
    full can record nothing more (no outcome, no lease expiry) and stays running."""

    @app.task(name="waits.hoarder")
    def hoarder(ctx: TaskContext, payload: Any) -> Any:
        for n in range(8):
            ctx.step(f"chunk-{n}", lambda: "x" * 60_000)
        return "kept everything"

    app.provision()
    run = app.trigger("waits.hoarder")
    app.worker().drain()
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED, (stored.status, len(stored.steps))
    assert stored.failure is not None


# signals -----------------------------------------------------------------------------------


def register_signal_waiter(app: Runlane, seen: list[tuple[str, Any]]) -> None:
    @app.task(name="waits.signal")
    def waiter(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal(payload["key"])
        seen.append((ctx.run_id, result.payload))
        return {"status": result.status, "payload": result.payload}


def test_a_signal_wakes_three_current_waiters_and_none_that_wait_later(app: Runlane) -> None:
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
    app.provision()
    assert app.signals.send("approved", "too early") == 0
    runs = app.trigger_many("waits.signal", [{"key": "approved"}] * 3)
    assert drain(app, 3) == 3
    assert {status(app, r.id) for r in runs} == {RunStatus.RELEASED}

    assert app.signals.send("approved", {"by": "alice"}) == 3
    late = app.trigger("waits.signal", {"key": "approved"})
    assert drain_all(app, 4) == 4
    assert sorted(seen) == sorted((r.id, {"by": "alice"}) for r in runs)
    for run in runs:
        done = app.runs.get(run.id)
        assert done.result == {"status": "received", "payload": {"by": "alice"}}
        assert event_types(app, run.id).count(EventType.SIGNAL_RECEIVED) == 1
    assert status(app, late.id) is RunStatus.RELEASED
    assert app.signals.send("approved", "second") == 1
    assert drain(app) == 1
    assert app.runs.get(late.id).result == {"status": "received", "payload": "second"}


def test_a_signal_key_with_brackets_wakes_its_waiter(app: Runlane) -> None:
    """Signal keys may hold any printable character; the woken run's result is written
    into the ``wait_results`` map under the wait's name, which contains the key."""
    seen: list[tuple[str, Any]] = []
    register_signal_waiter(app, seen)
    app.provision()
    run = app.trigger("waits.signal", {"key": "orders[7]"})
    assert drain(app) == 1
    assert app.signals.send("orders[7]", "shipped") == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"status": "received", "payload": "shipped"}


def test_a_signal_wait_times_out_through_a_maintenance_pass(
    app: Runlane, clock: ManualClock
) -> None:
    @app.task(name="waits.impatient")
    def impatient(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_signal("never-sent", timeout=timedelta(minutes=30))
        return {"status": result.status, "payload": result.payload}

    app.provision()
    run = app.trigger("waits.impatient")
    assert drain(app) == 1
    assert app.runs.get(run.id).due_at == START + timedelta(minutes=30)
    clock.advance(timedelta(minutes=29))
    assert published(app.maintenance.run_pass()) == 0
    clock.advance(timedelta(minutes=1))
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.result == {"status": "timed_out", "payload": None}
    assert list(done.wait_results.values()) == [{"status": "timed_out"}]
    assert event_types(app, run.id)[-3:] == [
        EventType.WAIT_TIMED_OUT,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert app.signals.send("never-sent") == 0


# tokens ------------------------------------------------------------------------------------


def register_token_waiter(app: Runlane, resumed: Counter[str], lock: threading.Lock) -> None:
    @app.task(name="waits.token")
    def waiter(ctx: TaskContext, payload: Any) -> Any:
        result = ctx.wait_for_token(payload["token"])
        with lock:
            resumed[ctx.run_id] += 1
        return {"status": result.status.value, "value": result.value}


def test_a_token_resumes_120_linked_runs_in_bounded_batches_each_once(
    app: Runlane, clock: ManualClock, dynamodb: Any
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed, threading.Lock())
    app.provision()
    token = app.tokens.create(metadata={"approval": "budget"})
    runs = app.trigger_many("waits.token", [{"token": token.id}] * LINKED_RUNS)
    ids = {r.id for r in runs}
    assert drain_all(app, WORKERS) == LINKED_RUNS
    assert statuses(dynamodb, app, ids) == {RunStatus.RELEASED: LINKED_RUNS}
    item = raw_run_item(dynamodb, app, runs[0].id)
    assert item["wait_pk"]["S"] == keys.wait_pk(app.config.environment, "token", token.id)

    app.tokens.complete(token.id, {"approved": True})
    # one small immediate resume pass; maintenance finishes the rest
    assert statuses(dynamodb, app, ids) == {
        RunStatus.QUEUED: RESUME_BATCH,
        RunStatus.RELEASED: LINKED_RUNS - RESUME_BATCH,
    }
    assert app.tokens.get(token.id).resuming is True

    passes = 0
    while RunStatus.RELEASED in statuses(dynamodb, app, ids):
        passes += 1
        assert passes <= 10, "maintenance did not resume the remaining runs"
        app.maintenance.run_pass()
        clock.advance(timedelta(minutes=1))
    assert app.tokens.get(token.id).resuming is False

    assert drain_all(app, WORKERS) == LINKED_RUNS
    stored = stored_runs(dynamodb, app, ids)
    for run, events in stored.values():
        assert run.status is RunStatus.SUCCEEDED
        assert run.result == {"status": "completed", "value": {"approved": True}}
        assert [e.type for e in events].count(EventType.TOKEN_COMPLETED) == 1
    assert resumed == dict.fromkeys(ids, 1)


def test_a_token_is_decided_once(app: Runlane) -> None:
    app.provision()
    token = app.tokens.create(metadata={"for": "invoice-9"})
    assert len(token.id) == 32
    assert app.tokens.get(token.id).status is TokenStatus.PENDING
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
    make_app: Callable[..., Runlane],
) -> None:
    apps = [make_app() for _ in range(4)]  # four processes' worth of clients
    apps[0].provision()
    token = apps[0].tokens.create()
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
    assert apps[0].tokens.get(token.id).value == winners[0]


def test_a_token_past_its_timeout_is_timed_out_by_maintenance(
    app: Runlane, clock: ManualClock
) -> None:
    resumed: Counter[str] = Counter()
    register_token_waiter(app, resumed, threading.Lock())
    app.provision()
    token = app.tokens.create(timeout=timedelta(hours=1))
    run = app.trigger("waits.token", {"token": token.id})
    assert drain(app) == 1
    clock.advance(timedelta(minutes=59))
    app.maintenance.run_pass()
    assert app.tokens.get(token.id).status is TokenStatus.PENDING
    clock.advance(timedelta(minutes=1))
    app.maintenance.run_pass()
    assert app.tokens.get(token.id).status is TokenStatus.TIMED_OUT
    assert drain(app) == 1
    assert app.runs.get(run.id).result == {"status": "timed_out", "value": None}
    assert EventType.TOKEN_TIMED_OUT in event_types(app, run.id)


# waiting for another run -----------------------------------------------------------------


def register_parent_and_child(app: Runlane) -> None:
    @app.task(name="waits.child")
    def child(ctx: TaskContext, payload: Any) -> Any:
        ctx.wait_for_signal(f"go-{ctx.run_id}")
        if payload["fail"]:
            raise ValueError("child broke")
        return {"child": "done"}

    @app.task(name="waits.parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_run(payload["child"]).to_json()


@pytest.mark.parametrize("fail", [False, True], ids=["child succeeds", "child fails"])
def test_wait_for_run_resumes_the_parent_with_the_childs_outcome(
    app: Runlane, dynamodb: Any, fail: bool
) -> None:
    register_parent_and_child(app)
    app.provision()
    child = app.trigger("waits.child", {"fail": fail})
    parent = app.trigger("waits.parent", {"child": child.id})
    assert drain(app, 2) == 2
    waiting = app.runs.get(parent.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None
    assert (waiting.waiting.kind, waiting.waiting.target) == (WaitKind.RUN, child.id)
    assert raw_run_item(dynamodb, app, child.id)["watched"] == {"N": "1"}

    assert app.signals.send(f"go-{child.id}") == 1
    assert drain_all(app) == 2
    outcome = app.runs.get(parent.id).result
    assert outcome["run_id"] == child.id
    if fail:
        assert outcome["status"] == "failed"
        assert outcome["result"] is None
        assert outcome["failure"]["type"] == "builtins.ValueError"
        assert outcome["failure"]["message"] == "child broke"
    else:
        assert outcome == {
            "run_id": child.id,
            "status": "succeeded",
            "result": {"child": "done"},
            "failure": None,
        }
    resumed = [e for e in app.runs.events(parent.id) if e.type is EventType.RESUMED]
    assert [e.data["run"] for e in resumed] == [child.id]


# resume without a maintenance pass ---------------------------------------------------------


@contextmanager
def running_worker(app: Runlane) -> Iterator[Worker]:
    """``worker.run()`` in a background thread (idle long polls), stopped on exit."""
    worker = app.worker(concurrency=4, wait_seconds=1)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-waits-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=TIMEOUT_SECONDS)
    assert not thread.is_alive(), "the worker did not stop"
    assert errors == []


def test_a_token_completion_reaches_an_idle_worker_without_a_maintenance_pass(
    make_app: Callable[..., Runlane], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pass(self: Maintenance, **_: Any) -> PassReport:
        raise AssertionError("this test runs no maintenance pass")

    monkeypatch.setattr(Maintenance, "run_pass", no_pass)
    app = make_app()
    starts: list[int] = []

    @app.task(name="waits.approval")
    def approval(ctx: TaskContext, payload: Any) -> Any:
        starts.append(ctx.attempt)
        return ctx.wait_for_token(payload["token"]).value

    app.provision()
    token = app.tokens.create()
    with running_worker(app):
        run = app.trigger("waits.approval", {"token": token.id})
        wait_until(
            lambda: status(app, run.id) is RunStatus.RELEASED, TIMEOUT_SECONDS, "the release"
        )
        app.tokens.complete(token.id, {"approved": "yes"})
        wait_until(
            lambda: status(app, run.id) is RunStatus.SUCCEEDED,
            TIMEOUT_SECONDS,
            "the resumed run to succeed",
        )
    assert starts == [1, 2]
    done = app.runs.get(run.id)
    assert done.result == {"approved": "yes"}
    assert (done.attempt, done.failures) == (2, 0)
