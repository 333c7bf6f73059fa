"""Operators can observe runs (``app.runs``) on every backend: get a run, read its events
and its attempts; list runs newest first, filtered by status, task, queue and creation
window, page after page with an opaque cursor that visits every run exactly once; find
the run holding an idempotency key (``find_current``) or a singleton key
(``find_active``). On DynamoDB a listing reads the status index, one query per status,
and never scans the table."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import ManualClock, RunlaneError, RunNotFound, RunStatus
from runlane_sqs.adapters.dynamodb.keys import status_partitions
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.memory.dynamodb import InMemoryDynamoDB
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.api.app import Runlane
from runlane_sqs.api.runs import MAX_LIST_LIMIT, RunPage
from runlane_sqs.core.indexes import FINISHED_SHARDS, SHARDS
from runlane_sqs.core.model import Run
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.operator_support import (
    FAIL,
    FLAKY,
    FLIP,
    OK,
    OTHER,
    Tasks,
    make_running,
    one_of_each,
    trigger,
)
from tests.behaviour.worker_support import drain
from tests.emulators import count_requests

STATUS_QUERIES = len(status_partitions("test", RunStatus))
"""One query per shard of each status group (docs/design/storage.md, "Indexes")."""


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=Tasks().register)


def three_statuses(app: Runlane, clock: ManualClock) -> dict[RunStatus, list[Run]]:
    """Twelve runs, interleaved in creation time: four succeeded, four queued (due in an
    hour, so no wakeup is sent for them) and four failed."""
    made: dict[RunStatus, list[Run]] = {
        RunStatus.SUCCEEDED: [],
        RunStatus.QUEUED: [],
        RunStatus.FAILED: [],
    }
    for i in range(4):
        made[RunStatus.SUCCEEDED].append(trigger(app, clock, OK, i))
        made[RunStatus.QUEUED].append(trigger(app, clock, OK, f"later-{i}", delay=3600))
        made[RunStatus.FAILED].append(trigger(app, clock, FAIL, i))
    assert drain(app) == 8
    for status, runs in made.items():
        assert all(app.runs.get(r.id).status is status for r in runs)
    return made


def ids(runs: list[Run]) -> list[str]:
    return [r.id for r in runs]


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


def test_the_scenarios_run_on_the_backends_adapters(backend: Backend, app: Runlane) -> None:
    """Guard: the memory param drives the in-memory adapters (the DynamoDB store over the
    in-memory DynamoDB), the aws one DynamoDB and SQS."""
    assert isinstance(app.store, DynamoRunStore)
    assert isinstance(app.store.client, InMemoryDynamoDB) is not backend.real
    assert isinstance(app.transport, InMemoryTransport) is not backend.real


# get / events / attempts --------------------------------------------------------------


def test_get_events_and_attempts_of_an_unknown_run_raise_run_not_found(app: Runlane) -> None:
    missing = "f" * 32
    with pytest.raises(RunNotFound):
        app.runs.get(missing)
    with pytest.raises(RunNotFound):
        app.runs.events(missing)
    with pytest.raises(RunNotFound):
        app.runs.attempts(missing)
    with pytest.raises(RunNotFound):
        app.runs.history(missing)


def test_attempts_of_a_run_that_failed_twice_then_succeeded(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, FLAKY, "x")
    starts = []
    for worker in ("worker-1", "worker-2", "worker-3"):
        clock.advance(1)
        starts.append(app.clock.now())
        assert drain(app, max_runs=1, worker_id=worker) == 1

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


def test_history_is_the_run_its_events_and_its_attempts_in_one_read(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, FLAKY, "x")
    clock.advance(1)
    assert drain(app, max_runs=1, worker_id="worker-1") == 1

    history = app.runs.history(run.id)

    assert history.run == app.runs.get(run.id)
    assert history.events == app.runs.events(run.id)
    assert [e.seq for e in history.events] == list(range(1, len(history.events) + 1))
    assert history.attempts == app.runs.attempts(run.id)
    assert [(a.number, a.worker, a.outcome) for a in history.attempts] == [
        (1, "worker-1", "failed")
    ]


def test_attempts_of_a_queued_run_are_empty(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK)
    assert app.runs.attempts(run.id) == []


def test_attempts_of_a_running_run_end_with_an_open_attempt(
    app: Runlane, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK)
    make_running(app, run, owner="worker-busy")
    (attempt,) = app.runs.attempts(run.id)
    assert (attempt.number, attempt.worker, attempt.started_at) == (
        1,
        "worker-busy",
        app.clock.now(),
    )
    assert (attempt.ended_at, attempt.outcome) == (None, None)


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


def test_a_page_iterates_over_its_runs_and_keeps_its_cursor(
    app: Runlane, clock: ManualClock
) -> None:
    created = [trigger(app, clock, OK, i) for i in range(5)]
    first = app.runs.list(limit=3)
    assert [run.id for run in first] == [r.id for r in reversed(created)][:3]
    assert len(first) == 3 and list(first) == first.runs
    rest = app.runs.list(limit=3, cursor=first.cursor)
    assert [run.payload for run in rest] == [1, 0] and rest.cursor is None
    assert len(app.runs.list(task="ops.nothing")) == 0


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


def test_list_without_a_status_returns_every_status_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    runs = one_of_each(app, clock)
    expected = newest_first(list(runs.values()))
    assert ids(app.runs.list().runs) == expected
    seen, sizes = walk(app, limit=4)
    assert ids(seen) == expected
    assert sizes[0] == 4


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
    runs = [trigger(app, clock, OK if i % 2 else FAIL, i) for i in range(6)]
    times = [r.created_at for r in runs]

    after = app.runs.list(created_after=times[3])
    assert ids(after.runs) == newest_first(runs[3:])
    before = app.runs.list(created_before=times[1])
    assert ids(before.runs) == newest_first(runs[:2])
    assert ids(app.runs.list(created_before=times[0]).runs) == [runs[0].id]
    window = app.runs.list(created_after=times[2], created_before=times[4])
    assert ids(window.runs) == newest_first(runs[2:5])
    between = app.runs.list(
        created_after=times[2] + timedelta(milliseconds=500),
        created_before=times[4] - timedelta(milliseconds=500),
    )
    assert ids(between.runs) == [runs[3].id]
    assert app.runs.list(created_after=times[-1] + timedelta(milliseconds=1)).runs == []
    # a window combines with the other filters
    assert ids(app.runs.list(task=OK, created_before=times[4]).runs) == [runs[3].id, runs[1].id]


def test_a_creation_window_bound_inside_a_millisecond_is_exact(
    app: Runlane, clock: ManualClock
) -> None:
    """Times are stored in whole milliseconds; a bound between two stored times includes
    exactly the runs on its side of it."""
    runs = [trigger(app, clock, OK, i) for i in range(5)]
    times = [r.created_at for r in runs]
    half = timedelta(microseconds=500)
    assert ids(app.runs.list(created_after=times[2] + half).runs) == newest_first(runs[3:])
    assert ids(app.runs.list(created_before=times[2] - half).runs) == newest_first(runs[:2])
    inside = app.runs.list(created_after=times[1] + half, created_before=times[3] - half)
    assert ids(inside.runs) == [runs[2].id]


# pagination ---------------------------------------------------------------------------


def test_pagination_visits_every_run_exactly_once_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    runs = [trigger(app, clock, OK, i) for i in range(23)]
    seen, sizes = walk(app, limit=5)
    assert sizes == [5, 5, 5, 5, 3]
    assert ids(seen) == newest_first(runs)
    assert len(set(ids(seen))) == 23


def test_pagination_of_runs_created_in_the_same_millisecond_repeats_nothing(
    app: Runlane, clock: ManualClock
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


@pytest.mark.parametrize("limit", [3, 4, 5])
def test_pagination_across_three_statuses_visits_every_run_once_newest_first(
    app: Runlane, limit: int, clock: ManualClock
) -> None:
    made = three_statuses(app, clock)
    everything = [r for runs in made.values() for r in runs]

    seen, sizes = walk(app, status=["succeeded", "failed", "queued"], limit=limit)

    assert len(seen) == 12
    assert len(set(ids(seen))) == 12, "a run was listed twice"
    assert ids(seen) == newest_first(everything)
    assert all(size <= limit for size in sizes)
    assert sizes[: 12 // limit] == [limit] * (12 // limit)
    # the listed runs are the full stored runs, not index projections
    by_id = {r.id: r for r in seen}
    for status, runs in made.items():
        for run in runs:
            assert by_id[run.id].status is status
            assert by_id[run.id] == app.runs.get(run.id)


def test_pagination_keeps_the_filters_of_the_query(app: Runlane, clock: ManualClock) -> None:
    ok_runs = []
    for i in range(7):
        ok_runs.append(trigger(app, clock, OK, i))
        trigger(app, clock, OTHER, i)
    seen, _ = walk(app, task=OK, limit=2)
    assert ids(seen) == newest_first(ok_runs)


def test_listing_one_task_across_statuses_pages_newest_first(
    app: Runlane, clock: ManualClock
) -> None:
    """On DynamoDB the task filter is applied after the query's ``Limit``, so a status
    partition may return fewer matches than asked for while newer matches of it are
    still unread. Pages must still come out newest first across pages."""
    # oldest -> newest; the OK runs are noise in the succeeded partition
    made = [
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
    expected = newest_first([r for r in made if r.task == FLIP])
    assert [app.runs.get(i).payload["n"] for i in expected] == [6, 5, 4, 3, 2, 1]
    # one page holding everything is right: each partition returns all it has
    assert ids(app.runs.list(task=FLIP, limit=100).runs) == expected

    seen, _ = walk(app, task=FLIP, status=["succeeded", "failed"], limit=2)
    assert len(set(ids(seen))) == len(seen) == 6
    assert [r.payload["n"] for r in seen] == [6, 5, 4, 3, 2, 1]
    assert ids(seen) == expected


# find_current / find_active ----------------------------------------------------------


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
    failing = trigger(app, clock, FAIL, "p", singleton_key="user-7")
    assert drain(app) == 1
    assert app.runs.get(failing.id).status is RunStatus.FAILED
    assert app.runs.find_active(FAIL, "user-7") is None


def test_find_refuses_a_malformed_key(app: Runlane) -> None:
    with pytest.raises(RunlaneError):
        app.runs.find_current(OK, "")
    with pytest.raises(RunlaneError):
        app.runs.find_active(OK, "")


# refused queries ----------------------------------------------------------------------


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


def test_a_damaged_cursor_is_refused(app: Runlane, clock: ManualClock) -> None:
    trigger(app, clock, OK)
    with pytest.raises(RunlaneError):
        app.runs.list(cursor="%%% not a cursor %%%")


# how DynamoDB is read -----------------------------------------------------------------


@ONLY_AWS
def test_a_list_queries_the_status_index_and_never_scans(app: Runlane, clock: ManualClock) -> None:
    three_statuses(app, clock)
    counts = count_requests(app.client("dynamodb"))

    page = app.runs.list(limit=10)
    assert len(page.runs) == 10
    assert set(counts) == {"Query", "BatchGetItem"}
    assert counts["Query"] == STATUS_QUERIES  # one per status-index partition
    assert counts["BatchGetItem"] == 1

    counts.clear()
    rest = app.runs.list(limit=10, cursor=page.cursor)
    assert len(rest.runs) == 2
    assert set(counts) <= {"Query", "BatchGetItem"}
    # finished partitions are not queried again
    assert counts["Query"] < STATUS_QUERIES

    counts.clear()
    app.runs.list(status="failed", task=FAIL, limit=10)
    assert dict(counts) == {"Query": FINISHED_SHARDS, "BatchGetItem": 1}

    counts.clear()
    assert app.runs.list(status="retrying").runs == []
    # the active group's runs are read (it holds every unfinished status): none retries
    assert dict(counts) == {"Query": SHARDS, "BatchGetItem": 1}
