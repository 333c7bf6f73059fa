"""The operator API (``app.runs``, ``app.idempotency``) over the in-memory app, with time
moved by hand (semantic 17): list and filter, attempts, cancel, retry, rerun, prune,
find_current / find_active and idempotency reset."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    IllegalTransition,
    RetryPolicy,
    Runlane,
    RunlaneError,
    RunNotFound,
    RunStatus,
    TaskContext,
    UnknownTaskError,
)
from runlane_sqs.adapters.memory.store import InMemoryRunStore
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.api.runs import MAX_LIST_LIMIT, PruneReport, RunPage
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run
from runlane_sqs.testing import ManualClock, in_memory_app

OK = "ops.ok"
FAIL = "ops.fail"
WAIT = "ops.wait"
OTHER = "ops.other"
FLAKY = "ops.flaky"
LEASE = timedelta(seconds=60)


class Boom(Exception):
    """Raised by the failing handlers."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    app = in_memory_app(clock=clock)
    register(app)
    return app


def register(app: Runlane) -> dict[str, Any]:
    """The tasks the tests use; ``state["fail"]`` toggles the failing handler."""
    state: dict[str, Any] = {"fail": True, "flaky_left": 2}

    @app.task(name=OK)
    def ok(ctx: TaskContext, payload: Any) -> Any:
        return {"echo": payload}

    @app.task(name=FAIL)
    def fail(ctx: TaskContext, payload: Any) -> Any:
        if state["fail"]:
            raise Boom(f"failed on {str(payload)[:40]}")
        return {"recovered": payload}

    @app.task(name=WAIT)
    def wait(ctx: TaskContext, payload: Any) -> Any:
        return ctx.release(delay=3600)

    @app.task(name=OTHER, queue="other")
    def other(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=3, backoff="fixed", delay=0))
    def flaky(ctx: TaskContext, payload: Any) -> Any:
        if state["flaky_left"] > 0:
            state["flaky_left"] -= 1
            raise Boom(f"attempt {ctx.attempt}")
        return "finally"

    app.state = state  # type: ignore[attr-defined]
    return state


def store(app: Runlane) -> InMemoryRunStore:
    assert isinstance(app.store, InMemoryRunStore)
    return app.store


def drain(app: Runlane, worker_id: str = "worker-test", max_runs: int | None = None) -> int:
    return app.worker(worker_id=worker_id, wait_seconds=0).drain(max_runs)


def trigger(app: Runlane, clock: ManualClock, task: str, payload: Any = None, **kw: Any) -> Run:
    """Trigger one second after the previous trigger, so creation times are distinct."""
    clock.advance(1)
    return app.trigger(task, payload, **kw)


def make_running(app: Runlane, run: Run, owner: str = "worker-held") -> Run:
    """Claim ``run`` directly, as a worker that is still executing it would have."""
    decision = machine.claim_lease(
        app.runs.get(run.id), now=app.clock.now(), owner=owner, token="tok-held", duration=LEASE
    )
    assert isinstance(decision, machine.Transition)
    return app.store.apply(decision)


def one_of_each(app: Runlane, clock: ManualClock) -> dict[RunStatus, Run]:
    """A run in each of succeeded, failed, cancelled, released, queued and running."""
    succeeded = trigger(app, clock, OK, "s")
    failed = trigger(app, clock, FAIL, "f")
    released = trigger(app, clock, WAIT, "w")
    assert drain(app) == 3
    cancelled = trigger(app, clock, OK, "c")
    app.runs.cancel(cancelled.id, reason="not needed", actor="tests")
    running = trigger(app, clock, OK, "r")
    make_running(app, running)
    queued = trigger(app, clock, OK, "q", delay=3600)
    runs = {
        RunStatus.SUCCEEDED: succeeded,
        RunStatus.FAILED: failed,
        RunStatus.RELEASED: released,
        RunStatus.CANCELLED: cancelled,
        RunStatus.RUNNING: running,
        RunStatus.QUEUED: queued,
    }
    for status, run in runs.items():
        assert app.runs.get(run.id).status is status
    return runs


def ids(runs: list[Run]) -> list[str]:
    return [r.id for r in runs]


def newest_first(runs: list[Run]) -> list[str]:
    return [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)]


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    return [e.type for e in app.runs.events(run_id)]


# get / events -------------------------------------------------------------------------


def test_get_and_events_of_an_unknown_run_raise_run_not_found(app: Runlane) -> None:
    missing = "f" * 32
    with pytest.raises(RunNotFound):
        app.runs.get(missing)
    with pytest.raises(RunNotFound):
        app.runs.events(missing)
    with pytest.raises(RunNotFound):
        app.runs.attempts(missing)


# list ---------------------------------------------------------------------------------


def test_list_returns_runs_newest_first(app: Runlane, clock: ManualClock) -> None:
    created = [trigger(app, clock, OK, i) for i in range(5)]
    page = app.runs.list()
    assert isinstance(page, RunPage)
    assert ids(page.runs) == [r.id for r in reversed(created)]
    assert page.cursor is None
    assert [r.payload for r in page.runs] == [4, 3, 2, 1, 0]


def test_list_of_an_empty_store_is_an_empty_last_page(app: Runlane) -> None:
    assert app.runs.list() == RunPage([], None)


def test_list_filters_by_one_status(app: Runlane, clock: ManualClock) -> None:
    runs = one_of_each(app, clock)
    for status, run in runs.items():
        for value in (status, status.value):
            page = app.runs.list(status=value)
            assert ids(page.runs) == [run.id], status
            assert page.runs[0].status is status


def test_list_filters_by_several_statuses(app: Runlane, clock: ManualClock) -> None:
    runs = one_of_each(app, clock)
    terminal = [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED]
    page = app.runs.list(status=terminal)
    assert ids(page.runs) == newest_first([runs[s] for s in terminal])
    mixed = app.runs.list(status=["queued", RunStatus.RUNNING, "released"])
    assert ids(mixed.runs) == newest_first(
        [runs[RunStatus.QUEUED], runs[RunStatus.RUNNING], runs[RunStatus.RELEASED]]
    )
    assert app.runs.list(status=["retrying"]).runs == []


def test_list_without_a_status_returns_every_status(app: Runlane, clock: ManualClock) -> None:
    runs = one_of_each(app, clock)
    assert ids(app.runs.list().runs) == newest_first(list(runs.values()))


def test_list_filters_by_task_and_by_queue(app: Runlane, clock: ManualClock) -> None:
    ok_runs = [trigger(app, clock, OK, i) for i in range(3)]
    other_runs = [trigger(app, clock, OTHER, i) for i in range(2)]
    fail_run = trigger(app, clock, FAIL, "x")

    assert ids(app.runs.list(task=OK).runs) == newest_first(ok_runs)
    assert ids(app.runs.list(task=FAIL).runs) == [fail_run.id]
    assert ids(app.runs.list(queue="other").runs) == newest_first(other_runs)
    assert ids(app.runs.list(queue="default").runs) == newest_first([*ok_runs, fail_run])
    assert app.runs.list(task=OK, queue="other").runs == []
    assert app.runs.list(task="ops.nothing").runs == []
    # filters combine with a status
    assert drain(app) == 6
    assert ids(app.runs.list(task=FAIL, status="failed").runs) == [fail_run.id]
    assert app.runs.list(task=FAIL, status="succeeded").runs == []


def test_list_filters_by_creation_window(app: Runlane, clock: ManualClock) -> None:
    runs = [trigger(app, clock, OK, i) for i in range(6)]
    times = [r.created_at for r in runs]

    after = app.runs.list(created_after=times[3])
    assert ids(after.runs) == newest_first(runs[3:])
    before = app.runs.list(created_before=times[1])
    assert ids(before.runs) == newest_first(runs[:2])
    window = app.runs.list(created_after=times[2], created_before=times[4])
    assert ids(window.runs) == newest_first(runs[2:5])
    between = app.runs.list(
        created_after=times[2] + timedelta(milliseconds=500),
        created_before=times[4] - timedelta(milliseconds=500),
    )
    assert ids(between.runs) == [runs[3].id]
    # a bound inside a stored millisecond (times are stored in whole milliseconds)
    inside = app.runs.list(
        created_after=times[2] + timedelta(microseconds=500),
        created_before=times[4] - timedelta(microseconds=500),
    )
    assert ids(inside.runs) == [runs[3].id]
    assert app.runs.list(created_after=times[-1] + timedelta(seconds=1)).runs == []


def walk(app: Runlane, **query: Any) -> tuple[list[Run], list[int]]:
    """Every page of a listing: the runs in order and the size of each page."""
    seen: list[Run] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(100):
        page = app.runs.list(cursor=cursor, **query)
        seen.extend(page.runs)
        sizes.append(len(page.runs))
        cursor = page.cursor
        if cursor is None:
            return seen, sizes
    raise AssertionError("pagination did not end")


def test_pagination_visits_every_run_exactly_once_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    runs = [trigger(app, clock, OK, i) for i in range(23)]
    seen, sizes = walk(app, limit=5)
    assert sizes == [5, 5, 5, 5, 3]
    assert ids(seen) == newest_first(runs)
    assert len(set(ids(seen))) == 23


def test_pagination_of_runs_created_in_the_same_millisecond_repeats_nothing(
    app: Runlane,
) -> None:
    runs = [app.trigger(OK, i) for i in range(23)]  # the clock does not move
    assert len({r.created_at for r in runs}) == 1
    seen, sizes = walk(app, limit=5)
    assert sizes == [5, 5, 5, 5, 3]
    assert sorted(ids(seen)) == sorted(ids(runs))
    assert len(set(ids(seen))) == 23


def test_pagination_with_an_exact_multiple_of_the_limit(app: Runlane, clock: ManualClock) -> None:
    runs = [trigger(app, clock, OK, i) for i in range(10)]
    seen, sizes = walk(app, limit=5)
    assert ids(seen) == newest_first(runs)
    assert sum(sizes) == 10 and sizes[:2] == [5, 5] and all(s == 0 for s in sizes[2:])


def test_pagination_across_several_statuses_visits_every_run_once(
    app: Runlane, clock: ManualClock
) -> None:
    app.state["fail"] = True  # type: ignore[attr-defined]
    made = []
    for i in range(4):
        made += [trigger(app, clock, OK, i), trigger(app, clock, FAIL, i)]
    assert drain(app) == 8
    made += [trigger(app, clock, OK, f"q{i}", delay=3600) for i in range(4)]
    seen, sizes = walk(app, status=["succeeded", "failed", "queued"], limit=3)
    assert ids(seen) == newest_first(made)
    assert sizes[:4] == [3, 3, 3, 3]


def test_pagination_keeps_the_filters_of_the_query(app: Runlane, clock: ManualClock) -> None:
    ok_runs = []
    for i in range(7):
        ok_runs.append(trigger(app, clock, OK, i))
        trigger(app, clock, OTHER, i)
    seen, _ = walk(app, task=OK, limit=2)
    assert ids(seen) == newest_first(ok_runs)


@pytest.mark.parametrize("limit", [0, -1, MAX_LIST_LIMIT + 1])
def test_a_limit_out_of_range_is_refused(app: Runlane, limit: int) -> None:
    with pytest.raises(RunlaneError, match="limit"):
        app.runs.list(limit=limit)


def test_the_limit_bounds_are_accepted(app: Runlane, clock: ManualClock) -> None:
    runs = [trigger(app, clock, OK, i) for i in range(2)]
    assert ids(app.runs.list(limit=1).runs) == [runs[1].id]
    assert ids(app.runs.list(limit=MAX_LIST_LIMIT).runs) == newest_first(runs)


@pytest.mark.parametrize("status", ["done", "QUEUED", ["queued", "finished"]])
def test_an_unknown_status_is_refused(app: Runlane, status: Any) -> None:
    with pytest.raises(RunlaneError, match="unknown status"):
        app.runs.list(status=status)


def test_a_damaged_cursor_is_refused(app: Runlane) -> None:
    with pytest.raises(RunlaneError):
        app.runs.list(cursor="%%% not a cursor %%%")


# attempts -----------------------------------------------------------------------------


def test_attempts_of_a_run_that_failed_twice_then_succeeded(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, FLAKY, "x")
    starts = []
    for worker in ("worker-1", "worker-2", "worker-3"):
        clock.advance(1)
        starts.append(clock.now())
        assert drain(app, worker, max_runs=1) == 1

    attempts = app.runs.attempts(run.id)
    assert [(a.number, a.worker, a.outcome) for a in attempts] == [
        (1, "worker-1", "failed"),
        (2, "worker-2", "failed"),
        (3, "worker-3", "succeeded"),
    ]
    assert [a.started_at for a in attempts] == starts
    assert all(a.ended_at == a.started_at for a in attempts)  # the clock stood still
    assert [a.failure.message if a.failure else None for a in attempts] == [
        "attempt 1",
        "attempt 2",
        None,
    ]
    assert all(a.failure.type.endswith("Boom") for a in attempts[:2] if a.failure)


def test_attempts_of_a_queued_run_are_empty(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK)
    assert app.runs.attempts(run.id) == []


def test_attempts_of_a_running_run_end_with_an_open_attempt(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK)
    make_running(app, run, owner="worker-busy")
    (attempt,) = app.runs.attempts(run.id)
    assert (attempt.number, attempt.worker, attempt.started_at) == (1, "worker-busy", clock.now())
    assert (attempt.ended_at, attempt.outcome) == (None, None)


# cancel -------------------------------------------------------------------------------


def test_cancel_of_a_queued_run_records_actor_and_reason(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK)
    clock.advance(5)
    cancelled = app.runs.cancel(run.id, reason="customer asked", actor="alice")
    assert cancelled.status is RunStatus.CANCELLED
    last = app.runs.events(run.id)[-1]
    assert last.type is EventType.CANCELLED
    assert last.data == {"actor": "alice", "reason": "customer asked"}
    assert last.at == clock.now()
    assert drain(app) == 0  # its wakeup is stale now


def test_cancel_of_a_running_run_is_a_request_with_actor_and_reason(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK)
    make_running(app, run)
    requested = app.runs.cancel(run.id, reason="stuck", actor="bob")
    assert requested.status is RunStatus.CANCEL_REQUESTED
    last = app.runs.events(run.id)[-1]
    assert (last.type, last.data) == (
        EventType.CANCEL_REQUESTED,
        {"actor": "bob", "reason": "stuck"},
    )
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id, reason="again")


def test_cancel_defaults_to_the_operator_actor(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK)
    app.runs.cancel(run.id)
    assert app.runs.events(run.id)[-1].data == {"actor": "operator", "reason": ""}


def test_cancel_of_a_finished_run_is_illegal_and_changes_nothing(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK)
    assert drain(app) == 1
    before = app.runs.get(run.id)
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id, reason="too late")
    assert app.runs.get(run.id) == before


def test_cancel_of_an_unknown_run_raises_run_not_found(app: Runlane) -> None:
    with pytest.raises(RunNotFound):
        app.runs.cancel("e" * 32)


def test_cancel_frees_the_singleton_key(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, singleton_key="user-1")
    assert app.runs.find_active(OK, "user-1") == app.runs.get(run.id)
    app.runs.cancel(run.id)
    assert app.runs.find_active(OK, "user-1") is None
    again = trigger(app, clock, OK, singleton_key="user-1")
    assert again.created and again.id != run.id


# retry --------------------------------------------------------------------------------


def failed_run(app: Runlane, clock: ManualClock, payload: Any = None) -> Run:
    app.state["fail"] = True  # type: ignore[attr-defined]
    run = trigger(app, clock, FAIL, payload)
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    return stored


def test_retry_creates_a_linked_run_of_the_same_task_and_payload(
    app: Runlane, clock: ManualClock
) -> None:
    source = failed_run(app, clock, {"order": 7, "items": [1, 2]})
    clock.advance(10)
    retry = app.runs.retry(source.id, reason="fixed the bug", actor="carol")

    assert retry.id != source.id
    assert retry.status is RunStatus.QUEUED
    assert (retry.task, retry.queue, retry.payload) == (FAIL, source.queue, source.payload)
    assert (retry.source_run_id, retry.source_kind) == (source.id, "retry")
    assert retry.created_at == clock.now()
    assert retry.attempt == 0
    stored = app.runs.get(retry.id)
    assert (stored.source_run_id, stored.source_kind) == (source.id, "retry")
    (triggered,) = app.runs.events(retry.id)
    assert triggered.type is EventType.TRIGGERED
    assert triggered.data == {
        "source": source.id,
        "kind": "retry",
        "actor": "carol",
        "reason": "fixed the bug",
    }

    after = app.runs.get(source.id)
    assert after.status is RunStatus.FAILED
    assert after.seq == source.seq + 1
    linked = app.runs.events(source.id)[-1]
    assert linked.type is EventType.LINKED_RUN
    assert linked.at == clock.now()
    assert linked.data == {
        "run": retry.id,
        "kind": "retry",
        "actor": "carol",
        "reason": "fixed the bug",
    }


def test_a_retried_run_is_executed_and_its_source_stays_failed(
    app: Runlane, clock: ManualClock
) -> None:
    source = failed_run(app, clock, "p")
    app.state["fail"] = False  # type: ignore[attr-defined]
    retry = app.runs.retry(source.id)
    assert drain(app) == 1
    done = app.runs.get(retry.id)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, {"recovered": "p"})
    assert app.runs.get(source.id).status is RunStatus.FAILED
    assert event_types(app, source.id)[-1] is EventType.LINKED_RUN


def test_a_failed_run_may_be_retried_more_than_once(app: Runlane, clock: ManualClock) -> None:
    source = failed_run(app, clock)
    first = app.runs.retry(source.id, reason="one")
    second = app.runs.retry(source.id, reason="two")
    assert first.id != second.id
    links = [e.data for e in app.runs.events(source.id) if e.type is EventType.LINKED_RUN]
    assert [(d["run"], d["reason"]) for d in links] == [(first.id, "one"), (second.id, "two")]


def test_retry_of_a_retry_links_to_its_own_source(app: Runlane, clock: ManualClock) -> None:
    source = failed_run(app, clock)
    first = app.runs.retry(source.id)
    assert drain(app) == 1
    assert app.runs.get(first.id).status is RunStatus.FAILED
    second = app.runs.retry(first.id)
    assert (second.source_run_id, second.source_kind) == (first.id, "retry")


@pytest.mark.parametrize(
    "status",
    [
        RunStatus.SUCCEEDED,
        RunStatus.CANCELLED,
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.RELEASED,
    ],
)
def test_retry_is_only_for_failed_runs(app: Runlane, clock: ManualClock, status: RunStatus) -> None:
    run = one_of_each(app, clock)[status]
    before = app.runs.get(run.id)
    count = len(store(app).all_runs())
    with pytest.raises(IllegalTransition):
        app.runs.retry(run.id)
    assert app.runs.get(run.id) == before
    assert len(store(app).all_runs()) == count


def test_retry_of_an_unknown_run_raises_run_not_found(app: Runlane) -> None:
    with pytest.raises(RunNotFound):
        app.runs.retry("d" * 32)


# rerun --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_rerun_of_a_finished_run_creates_a_linked_run(
    app: Runlane, clock: ManualClock, status: RunStatus
) -> None:
    source = app.runs.get(one_of_each(app, clock)[status].id)
    clock.advance(1)
    rerun = app.runs.rerun(source.id, reason="replay", actor="dave")
    assert rerun.status is RunStatus.QUEUED
    assert (rerun.task, rerun.payload) == (source.task, source.payload)
    assert (rerun.source_run_id, rerun.source_kind) == (source.id, "rerun")
    assert app.runs.get(source.id).status is status
    linked = app.runs.events(source.id)[-1]
    assert (linked.type, linked.data) == (
        EventType.LINKED_RUN,
        {"run": rerun.id, "kind": "rerun", "actor": "dave", "reason": "replay"},
    )
    assert app.runs.events(rerun.id)[0].data["kind"] == "rerun"


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RELEASED])
def test_rerun_of_an_unfinished_run_is_illegal(
    app: Runlane, clock: ManualClock, status: RunStatus
) -> None:
    run = one_of_each(app, clock)[status]
    before = app.runs.get(run.id)
    with pytest.raises(IllegalTransition):
        app.runs.rerun(run.id)
    assert app.runs.get(run.id) == before


def test_rerun_of_a_succeeded_run_runs_it_again(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, {"n": 1})
    assert drain(app) == 1
    rerun = app.runs.rerun(run.id)
    assert drain(app) == 1
    assert app.runs.get(rerun.id).result == {"echo": {"n": 1}}


def test_a_rerun_does_not_take_the_sources_idempotency_key(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-1")
    assert drain(app) == 1
    rerun = app.runs.rerun(run.id)
    assert rerun.idempotency_key is None
    assert app.runs.find_current(OK, "order-1") == app.runs.get(run.id)


def test_retry_and_rerun_of_a_task_no_longer_registered_raise_unknown_task(
    app: Runlane, clock: ManualClock
) -> None:
    failed = failed_run(app, clock)
    succeeded = trigger(app, clock, OK)
    assert drain(app) == 1
    # a deployment that no longer has these tasks, over the same store and queues
    later = Runlane(
        environment=app.config.environment,
        clock=clock,
        store=app.store,
        transport=app.transport,
    )

    @later.task(name="ops.new")
    def new(ctx: TaskContext, payload: Any) -> None:
        return None

    before = {r.id: r for r in store(app).all_runs()}
    with pytest.raises(UnknownTaskError):
        later.runs.retry(failed.id)
    with pytest.raises(UnknownTaskError):
        later.runs.rerun(succeeded.id)
    # nothing was linked and no run was created
    assert {r.id: r for r in store(app).all_runs()} == before
    assert EventType.LINKED_RUN not in event_types(app, failed.id)


def test_a_retry_that_cannot_create_its_run_leaves_no_link_behind(
    app: Runlane, clock: ManualClock
) -> None:
    """The audit link must name a run that exists: if the new run cannot be written, the
    source's history must not claim it was retried."""
    source = failed_run(app, clock, "x" * 2000)
    # an operator's app over the same store, configured with a smaller payload limit
    operator = Runlane(
        environment=app.config.environment,
        clock=clock,
        store=app.store,
        transport=app.transport,
        payload_limit=1000,
    )
    register(operator)
    with pytest.raises(RunlaneError):
        operator.runs.retry(source.id, reason="try again")
    assert len(store(app).all_runs()) == 1
    assert EventType.LINKED_RUN not in event_types(app, source.id)


# prune --------------------------------------------------------------------------------


def aged(app: Runlane, clock: ManualClock) -> tuple[dict[RunStatus, Run], list[Run]]:
    """Old runs in every kind of status, then recent finished ones a day later."""
    old = one_of_each(app, clock)
    clock.advance(timedelta(days=1))
    recent = [trigger(app, clock, OK, f"new{i}") for i in range(2)]
    recent.append(trigger(app, clock, FAIL, "newf"))
    assert drain(app) == 3
    return old, recent


def test_prune_removes_only_finished_runs_older_than_the_cutoff(
    app: Runlane, clock: ManualClock
) -> None:
    old, recent = aged(app, clock)
    cutoff = clock.now() - timedelta(hours=12)
    report = app.runs.prune(older_than=cutoff)
    assert isinstance(report, PruneReport)
    assert (report.examined, report.deleted, report.cursor) == (3, 3, None)

    remaining = {r.id for r in store(app).all_runs()}
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        assert old[status].id not in remaining
        with pytest.raises(RunNotFound):
            app.runs.get(old[status].id)
        with pytest.raises(RunNotFound):
            app.runs.events(old[status].id)
    for status in (RunStatus.QUEUED, RunStatus.RELEASED, RunStatus.RUNNING):
        assert app.runs.get(old[status].id).status is status
    assert {r.id for r in recent} <= remaining


def test_prune_with_an_age(app: Runlane, clock: ManualClock) -> None:
    old, recent = aged(app, clock)
    assert app.runs.prune(older_than=timedelta(days=2)).deleted == 0
    report = app.runs.prune(older_than=3600)  # seconds
    assert report.deleted == 3
    unfinished = {old[s].id for s in (RunStatus.QUEUED, RunStatus.RELEASED, RunStatus.RUNNING)}
    assert {r.id for r in store(app).all_runs()} == unfinished | {r.id for r in recent}


def test_prune_keeps_a_run_created_after_the_cutoff(app: Runlane, clock: ManualClock) -> None:
    first = trigger(app, clock, OK)
    second = trigger(app, clock, OK)
    assert drain(app) == 2
    report = app.runs.prune(older_than=first.created_at)
    assert report.deleted == 1
    assert [r.id for r in store(app).all_runs()] == [second.id]


def test_prune_is_bounded_and_resumes_from_its_cursor(app: Runlane, clock: ManualClock) -> None:
    finished = [trigger(app, clock, OK, i) for i in range(7)]
    assert drain(app) == 7
    keep = trigger(app, clock, OK, "queued", delay=3600)
    clock.advance(timedelta(days=1))

    reports = [app.runs.prune(older_than=timedelta(hours=1), limit=3)]
    assert (reports[0].examined, reports[0].deleted) == (3, 3)
    assert reports[0].cursor is not None
    assert len(store(app).all_runs()) == 5
    while reports[-1].cursor is not None:
        assert len(reports) < 10
        reports.append(
            app.runs.prune(older_than=timedelta(hours=1), limit=3, cursor=reports[-1].cursor)
        )
    assert sum(r.deleted for r in reports) == 7
    assert all(r.deleted <= 3 for r in reports)
    assert [r.id for r in store(app).all_runs()] == [keep.id]
    for run in finished:
        with pytest.raises(RunNotFound):
            app.runs.get(run.id)


def test_prune_of_chosen_statuses_only(app: Runlane, clock: ManualClock) -> None:
    old = one_of_each(app, clock)
    clock.advance(timedelta(days=1))
    report = app.runs.prune(older_than=timedelta(hours=1), statuses=["cancelled"])
    assert report.deleted == 1
    with pytest.raises(RunNotFound):
        app.runs.get(old[RunStatus.CANCELLED].id)
    assert app.runs.get(old[RunStatus.SUCCEEDED].id).status is RunStatus.SUCCEEDED
    assert app.runs.get(old[RunStatus.FAILED].id).status is RunStatus.FAILED


@pytest.mark.parametrize(
    "statuses",
    [
        ["queued"],
        ["running"],
        ["released"],
        ["succeeded", "retrying"],
        [RunStatus.CANCEL_REQUESTED],
    ],
)
def test_prune_of_unfinished_statuses_is_illegal(
    app: Runlane, clock: ManualClock, statuses: list[Any]
) -> None:
    old = one_of_each(app, clock)
    clock.advance(timedelta(days=1))
    with pytest.raises(IllegalTransition):
        app.runs.prune(older_than=timedelta(hours=1), statuses=statuses)
    assert {r.id for r in store(app).all_runs()} == {r.id for r in old.values()}


def test_prune_frees_the_idempotency_key_of_a_succeeded_run(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-9")
    assert drain(app) == 1
    assert trigger(app, clock, OK, "p", idempotency_key="order-9").id == run.id
    clock.advance(timedelta(days=1))
    assert app.runs.prune(older_than=timedelta(hours=1)).deleted == 1
    assert app.runs.find_current(OK, "order-9") is None

    again = trigger(app, clock, OK, "p", idempotency_key="order-9")
    assert again.created is True
    assert again.id != run.id
    assert app.runs.find_current(OK, "order-9") == app.runs.get(again.id)


def test_prune_of_a_failed_run_leaves_the_key_of_the_run_that_took_it_over(
    app: Runlane, clock: ManualClock
) -> None:
    app.state["fail"] = True  # type: ignore[attr-defined]
    first = trigger(app, clock, FAIL, "p", idempotency_key="k")
    assert drain(app) == 1
    second = trigger(app, clock, FAIL, "p", idempotency_key="k", delay=timedelta(days=3))
    assert second.created and second.id != first.id
    clock.advance(timedelta(days=1))
    report = app.runs.prune(older_than=timedelta(hours=1))
    assert report.deleted == 1
    assert app.runs.find_current(FAIL, "k") == app.runs.get(second.id)
    assert trigger(app, clock, FAIL, "p", idempotency_key="k").id == second.id


def test_prune_of_nothing_reports_nothing(app: Runlane, clock: ManualClock) -> None:
    trigger(app, clock, OK)
    assert app.runs.prune(older_than=timedelta(0)) == PruneReport(0, 0, None)


# find_current / find_active / idempotency reset ---------------------------------------


def test_find_current_returns_the_holder_of_an_idempotency_key(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-1")
    assert app.runs.find_current(OK, "order-1") == app.runs.get(run.id)
    assert drain(app) == 1
    found = app.runs.find_current(OK, "order-1")
    assert found is not None and (found.id, found.status) == (run.id, RunStatus.SUCCEEDED)
    assert app.runs.find_current(OK, "order-2") is None
    assert app.runs.find_current(FAIL, "order-1") is None  # keys are per task


def test_find_current_is_none_once_the_holder_failed(app: Runlane, clock: ManualClock) -> None:
    app.state["fail"] = True  # type: ignore[attr-defined]
    run = trigger(app, clock, FAIL, "p", idempotency_key="order-3")
    assert app.runs.find_current(FAIL, "order-3") == app.runs.get(run.id)
    assert drain(app) == 1
    assert app.runs.find_current(FAIL, "order-3") is None
    again = trigger(app, clock, FAIL, "p", idempotency_key="order-3")
    assert again.created and again.id != run.id
    assert app.runs.find_current(FAIL, "order-3") == app.runs.get(again.id)


def test_find_current_is_none_once_the_key_outlived_its_retention(
    app: Runlane, clock: ManualClock
) -> None:
    """``find_current`` and ``trigger`` must agree: a key past its retention is free (the
    next trigger creates a new run), so it has no current holder."""
    run = trigger(app, clock, OK, "p", idempotency_key="order-4")
    assert drain(app) == 1
    clock.advance(app.config.idempotency_retention + timedelta(days=1))
    assert app.runs.find_current(OK, "order-4") is None
    again = trigger(app, clock, OK, "p", idempotency_key="order-4")
    assert again.created is True and again.id != run.id


def test_find_active_returns_the_unfinished_singleton_holder(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK, "p", singleton_key="user-7")
    assert app.runs.find_active(OK, "user-7") == app.runs.get(run.id)
    running = make_running(app, run)
    assert app.runs.find_active(OK, "user-7") == running
    assert app.runs.find_active(OK, "user-8") is None
    assert app.runs.find_active(OTHER, "user-7") is None


def test_find_active_is_none_once_the_holder_finished(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, "p", singleton_key="user-7")
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert app.runs.find_active(OK, "user-7") is None
    app.state["fail"] = True  # type: ignore[attr-defined]
    failing = trigger(app, clock, FAIL, "p", singleton_key="user-7")
    assert drain(app) == 1
    assert app.runs.get(failing.id).status is RunStatus.FAILED
    assert app.runs.find_active(FAIL, "user-7") is None


def test_find_refuses_a_malformed_key(app: Runlane) -> None:
    with pytest.raises(RunlaneError):
        app.runs.find_current(OK, "")
    with pytest.raises(RunlaneError):
        app.runs.find_active(OK, "")


def test_idempotency_reset_frees_the_key(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-5")
    assert drain(app) == 1
    assert trigger(app, clock, OK, "p", idempotency_key="order-5").id == run.id

    app.idempotency.reset(OK, "order-5")
    assert app.runs.find_current(OK, "order-5") is None
    again = trigger(app, clock, OK, "p", idempotency_key="order-5")
    assert again.created is True and again.id != run.id
    # the old run itself is untouched
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_idempotency_reset_of_a_free_key_is_harmless(app: Runlane) -> None:
    app.idempotency.reset(OK, "never-used")
    assert app.runs.find_current(OK, "never-used") is None


def test_idempotency_reset_is_per_task(app: Runlane, clock: ManualClock) -> None:
    ok_run = trigger(app, clock, OK, "p", idempotency_key="shared")
    other_run = trigger(app, clock, OTHER, "p", idempotency_key="shared")
    app.idempotency.reset(OTHER, "shared")
    assert app.runs.find_current(OK, "shared") == app.runs.get(ok_run.id)
    assert app.runs.find_current(OTHER, "shared") is None
    assert other_run.id != ok_run.id


def test_in_memory_transport_is_used(app: Runlane) -> None:
    """Guard: these tests drive the in-memory adapters, never AWS."""
    assert isinstance(app.transport, InMemoryTransport)
    assert isinstance(app.store, InMemoryRunStore)
