"""The operator API against DynamoDB and SQS (moto server), semantic 17: listing from the
status index (several statuses merged newest first with an opaque cursor, never a table
scan), filters, retry with its audit link, and bounded, resumable pruning."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    IllegalTransition,
    ManualClock,
    Runlane,
    RunNotFound,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run
from tests.integration.conftest import count_requests, scan_items

OK = "operator.ok"
FAIL = "operator.fail"
FLIP = "operator.flip"
LEASE = timedelta(seconds=60)
STATUS_QUERIES = len(RunStatus)


class Boom(Exception):
    """Raised by the failing handlers."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    app = make_app(clock=clock)
    state: dict[str, Any] = {"fail": True}

    @app.task(name=OK)
    def ok(ctx: TaskContext, payload: Any) -> Any:
        return {"echo": payload}

    @app.task(name=FAIL)
    def fail(ctx: TaskContext, payload: Any) -> Any:
        if state["fail"]:
            raise Boom(f"failed on {str(payload)[:40]}")
        return {"recovered": payload}

    @app.task(name=FLIP)
    def flip(ctx: TaskContext, payload: Any) -> Any:
        """Fails when the payload says so: one task whose runs end in two statuses."""
        if payload.get("fail"):
            raise Boom("asked to fail")
        return payload

    app.state = state  # type: ignore[attr-defined]
    app.provision()
    return app


def drain(app: Runlane) -> int:
    return app.worker(wait_seconds=0).drain()


def trigger(app: Runlane, clock: ManualClock, task: str, payload: Any = None, **kw: Any) -> Run:
    """Trigger one second after the previous trigger, so creation times are distinct."""
    clock.advance(1)
    return app.trigger(task, payload, **kw)


def newest_first(runs: list[Run]) -> list[str]:
    return [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)]


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


def three_statuses(app: Runlane, clock: ManualClock) -> dict[RunStatus, list[Run]]:
    """Twelve runs, interleaved in creation time: four succeeded, four failed, four queued
    (due in an hour, so no wakeup is sent for them)."""
    made: dict[RunStatus, list[Run]] = {s: [] for s in (RunStatus.SUCCEEDED, RunStatus.FAILED)}
    made[RunStatus.QUEUED] = []
    for i in range(4):
        made[RunStatus.SUCCEEDED].append(trigger(app, clock, OK, i))
        made[RunStatus.QUEUED].append(trigger(app, clock, OK, f"later-{i}", delay=3600))
        made[RunStatus.FAILED].append(trigger(app, clock, FAIL, i))
    assert drain(app) == 8
    for status, runs in made.items():
        assert all(app.runs.get(r.id).status is status for r in runs)
    return made


# list ---------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [4, 5])
def test_listing_three_statuses_pages_through_every_run_once_newest_first(
    app: Runlane, clock: ManualClock, limit: int
) -> None:
    made = three_statuses(app, clock)
    everything = [r for runs in made.values() for r in runs]

    seen, sizes = walk(app, status=["succeeded", "failed", "queued"], limit=limit)

    assert len(seen) == 12
    assert len({r.id for r in seen}) == 12, "a run was listed twice"
    assert [r.id for r in seen] == newest_first(everything)
    assert all(size <= limit for size in sizes)
    assert sizes[: 12 // limit] == [limit] * (12 // limit)
    # the listed runs are the full stored runs, not index projections
    by_id = {r.id: r for r in seen}
    for status, runs in made.items():
        for run in runs:
            listed = by_id[run.id]
            assert listed.status is status
            assert listed == app.runs.get(run.id)


def test_listing_every_status_without_a_filter_is_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    made = three_statuses(app, clock)
    running = trigger(app, clock, OK, "held", delay=0)
    claim = machine.claim_lease(
        app.runs.get(running.id), now=clock.now(), owner="worker-x", token="tok", duration=LEASE
    )
    assert isinstance(claim, machine.Transition)
    app.store.apply(claim)
    everything = [r for runs in made.values() for r in runs] + [running]

    seen, _ = walk(app, limit=3)
    assert [r.id for r in seen] == newest_first(everything)
    assert app.runs.list(status="running").runs[0].id == running.id


def test_listing_filters_by_task_and_by_creation_window(app: Runlane, clock: ManualClock) -> None:
    ok_runs = [trigger(app, clock, OK, i) for i in range(3)]
    fail_runs = [trigger(app, clock, FAIL, i) for i in range(2)]
    more_ok = [trigger(app, clock, OK, i) for i in range(3, 6)]
    everything = ok_runs + fail_runs + more_ok
    times = [r.created_at for r in everything]

    assert [r.id for r in app.runs.list(task=OK).runs] == newest_first(ok_runs + more_ok)
    assert [r.id for r in app.runs.list(task=FAIL).runs] == newest_first(fail_runs)
    assert app.runs.list(task="operator.none").runs == []

    window = app.runs.list(created_after=times[2], created_before=times[5])
    assert [r.id for r in window.runs] == newest_first(everything[2:6])
    assert [r.id for r in app.runs.list(created_after=times[6]).runs] == newest_first(
        everything[6:]
    )
    assert [r.id for r in app.runs.list(created_before=times[0]).runs] == [everything[0].id]
    assert app.runs.list(created_after=times[-1] + timedelta(milliseconds=1)).runs == []
    assert [r.id for r in app.runs.list(task=OK, created_before=times[4]).runs] == (
        newest_first(ok_runs)
    )
    # a filtered listing pages through every match exactly once
    seen, _ = walk(app, task=OK, limit=2)
    assert [r.id for r in seen] == newest_first(ok_runs + more_ok)


def test_a_creation_window_bound_inside_a_millisecond_is_exact(
    app: Runlane, clock: ManualClock
) -> None:
    """Times are stored in whole milliseconds; a bound between two stored times must
    include exactly the runs on its side of it (as the in-memory store does)."""
    runs = [trigger(app, clock, OK, i) for i in range(3)]
    middle = runs[1].created_at
    after = app.runs.list(created_after=middle + timedelta(microseconds=500))
    assert [r.id for r in after.runs] == [runs[2].id]
    before = app.runs.list(created_before=middle - timedelta(microseconds=500))
    assert [r.id for r in before.runs] == [runs[0].id]


def test_listing_one_task_across_statuses_pages_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    """The task filter is applied after DynamoDB's ``Limit``, so a status partition may
    return fewer matches than asked for while newer matches of it are still unread.
    Pages must still come out newest first across pages."""
    # oldest -> newest; the OK runs are noise in the succeeded partition
    flip_runs = [
        trigger(app, clock, FLIP, {"fail": False, "n": 1}),  # succeeded
        trigger(app, clock, OK, "noise-1"),
        trigger(app, clock, FLIP, {"fail": False, "n": 2}),  # succeeded
        trigger(app, clock, FLIP, {"fail": True, "n": 3}),  # failed
        trigger(app, clock, FLIP, {"fail": True, "n": 4}),  # failed
        trigger(app, clock, FLIP, {"fail": False, "n": 5}),  # succeeded
        trigger(app, clock, OK, "noise-2"),
        trigger(app, clock, FLIP, {"fail": False, "n": 6}),  # succeeded
    ]
    assert drain(app) == 8
    flip_runs = [r for r in flip_runs if r.task == FLIP]
    expected = newest_first(flip_runs)
    assert [app.runs.get(i).payload["n"] for i in expected] == [6, 5, 4, 3, 2, 1]
    # one page holding everything is right: each partition returns all it has
    assert [r.id for r in app.runs.list(task=FLIP, limit=100).runs] == expected

    seen, _ = walk(app, task=FLIP, status=["succeeded", "failed"], limit=2)
    assert len({r.id for r in seen}) == len(seen) == 6
    assert [r.payload["n"] for r in seen] == [6, 5, 4, 3, 2, 1]
    assert [r.id for r in seen] == expected


def test_a_list_queries_the_status_index_and_never_scans(app: Runlane, clock: ManualClock) -> None:
    three_statuses(app, clock)
    counts = count_requests(app.client("dynamodb"))

    page = app.runs.list(limit=10)
    assert len(page.runs) == 10
    assert "Scan" not in counts
    assert set(counts) == {"Query", "BatchGetItem"}
    assert counts["Query"] == STATUS_QUERIES  # one per status partition
    assert counts["BatchGetItem"] == 1

    counts.clear()
    rest = app.runs.list(limit=10, cursor=page.cursor)
    assert len(rest.runs) == 2
    assert "Scan" not in counts
    assert set(counts) <= {"Query", "BatchGetItem"}
    # finished partitions are not queried again
    assert counts["Query"] < STATUS_QUERIES

    counts.clear()
    app.runs.list(status="failed", task=FAIL, limit=10)
    assert dict(counts) == {"Query": 1, "BatchGetItem": 1}

    counts.clear()
    assert app.runs.list(status="retrying").runs == []
    assert dict(counts) == {"Query": 1}


# cancel / retry / rerun ---------------------------------------------------------------


def test_cancel_records_actor_and_reason(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, "x", delay=3600)
    cancelled = app.runs.cancel(run.id, reason="duplicate order", actor="alice")
    assert cancelled.status is RunStatus.CANCELLED
    last = app.runs.events(run.id)[-1]
    assert (last.type, last.data) == (
        EventType.CANCELLED,
        {"actor": "alice", "reason": "duplicate order"},
    )
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id)


def test_retry_creates_a_linked_run_that_a_worker_completes(
    app: Runlane, clock: ManualClock
) -> None:
    source = trigger(app, clock, FAIL, {"order": 42})
    assert drain(app) == 1
    failed = app.runs.get(source.id)
    assert failed.status is RunStatus.FAILED
    with pytest.raises(IllegalTransition):
        app.runs.rerun(trigger(app, clock, OK, "q", delay=3600).id)

    app.state["fail"] = False  # type: ignore[attr-defined]
    clock.advance(30)
    retry = app.runs.retry(source.id, reason="downstream fixed", actor="bob")
    assert (retry.source_run_id, retry.source_kind) == (source.id, "retry")
    assert (retry.task, retry.payload) == (FAIL, {"order": 42})
    assert retry.created_at == clock.now()

    assert drain(app) == 1
    done = app.runs.get(retry.id)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, {"recovered": {"order": 42}})
    assert (done.source_run_id, done.source_kind) == (source.id, "retry")
    assert app.runs.events(retry.id)[0].data == {
        "source": source.id,
        "kind": "retry",
        "actor": "bob",
        "reason": "downstream fixed",
    }

    after = app.runs.get(source.id)
    assert after.status is RunStatus.FAILED
    assert after.seq == failed.seq + 1
    linked = app.runs.events(source.id)[-1]
    assert linked.type is EventType.LINKED_RUN
    assert linked.data == {
        "run": retry.id,
        "kind": "retry",
        "actor": "bob",
        "reason": "downstream fixed",
    }
    with pytest.raises(IllegalTransition):
        app.runs.retry(retry.id)  # it succeeded: only a rerun is possible
    rerun = app.runs.rerun(retry.id)
    assert (rerun.source_run_id, rerun.source_kind) == (retry.id, "rerun")
    assert drain(app) == 1
    assert app.runs.get(rerun.id).status is RunStatus.SUCCEEDED


# prune --------------------------------------------------------------------------------


def run_items(dynamodb: Any, app: Runlane) -> set[str]:
    prefix = keys.run_pk(app.config.environment, "")
    return {
        item["pk"]["S"][len(prefix) :]
        for item in scan_items(dynamodb, app.config.table)
        if item["pk"]["S"].startswith(prefix)
    }


def test_prune_removes_only_old_finished_runs_in_bounded_resumable_batches(
    app: Runlane, clock: ManualClock, dynamodb: Any
) -> None:
    made = three_statuses(app, clock)
    cancelled = trigger(app, clock, OK, "c", delay=3600)
    app.runs.cancel(cancelled.id)
    keyed = trigger(app, clock, OK, "k", idempotency_key="order-1")
    assert drain(app) == 1
    old_finished = [*made[RunStatus.SUCCEEDED], *made[RunStatus.FAILED], cancelled, keyed]
    clock.advance(timedelta(days=2))
    recent = trigger(app, clock, OK, "recent")
    assert drain(app) == 1
    assert trigger(app, clock, OK, "k", idempotency_key="order-1").id == keyed.id

    reports = [app.runs.prune(older_than=timedelta(days=1), limit=3)]
    assert (reports[0].examined, reports[0].deleted) == (3, 3)
    assert reports[0].cursor is not None
    while reports[-1].cursor is not None:
        assert len(reports) < 10
        reports.append(
            app.runs.prune(older_than=timedelta(days=1), limit=3, cursor=reports[-1].cursor)
        )
    assert all(r.deleted <= 3 for r in reports)
    assert sum(r.deleted for r in reports) == len(old_finished) == 10

    remaining = run_items(dynamodb, app)
    assert remaining == {r.id for r in made[RunStatus.QUEUED]} | {recent.id}
    for run in old_finished:
        with pytest.raises(RunNotFound):
            app.runs.events(run.id)
        with pytest.raises(RunNotFound):
            app.runs.get(run.id)
    for run in made[RunStatus.QUEUED]:
        assert app.runs.get(run.id).status is RunStatus.QUEUED
    assert app.runs.get(recent.id).status is RunStatus.SUCCEEDED
    assert [r.id for r in app.runs.list(status="succeeded").runs] == [recent.id]

    # the pruned run's idempotency key is free again
    assert app.runs.find_current(OK, "order-1") is None
    again = trigger(app, clock, OK, "k", idempotency_key="order-1")
    assert again.created is True and again.id != keyed.id

    with pytest.raises(IllegalTransition):
        app.runs.prune(older_than=timedelta(0), statuses=["queued"])
    assert {r.id for r in made[RunStatus.QUEUED]} <= run_items(dynamodb, app)


def test_prune_never_scans(app: Runlane, clock: ManualClock) -> None:
    three_statuses(app, clock)
    clock.advance(timedelta(days=1))
    counts = count_requests(app.client("dynamodb"))
    report = app.runs.prune(older_than=timedelta(hours=1), limit=100)
    assert report.deleted == 8
    assert "Scan" not in counts
    assert set(counts) <= {"Query", "BatchGetItem", "DeleteItem"}
    assert counts["DeleteItem"] == 8


def test_find_current_and_idempotency_reset(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-7")
    assert drain(app) == 1
    found = app.runs.find_current(OK, "order-7")
    assert found is not None and (found.id, found.status) == (run.id, RunStatus.SUCCEEDED)
    app.idempotency.reset(OK, "order-7")
    assert app.runs.find_current(OK, "order-7") is None
    again = trigger(app, clock, OK, "p", idempotency_key="order-7")
    assert again.created and again.id != run.id

    single = trigger(app, clock, OK, "s", singleton_key="user-1", delay=3600)
    assert app.runs.find_active(OK, "user-1") == app.runs.get(single.id)
    app.runs.cancel(single.id)
    assert app.runs.find_active(OK, "user-1") is None
