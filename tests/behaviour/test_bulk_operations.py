"""Bulk recovery (docs/operations.md, "Bulk recovery"; ``app.bulk``) on every
backend: a dry run counts and writes nothing; an operation retries, cancels or reruns
exactly the runs its filter selects, at its rate, recording its id and actor in each
run's history; a failed run retried already is skipped. Its record shows its progress
after every page, an operator can stop it and resume it, and a process that dies
mid-page (after a run's new run was made and before it was linked, or after a run was
acted on and before the page was written) leaves it resumable: the resumed operation
acts on no run twice and its tally is exact. Bad filters, rates, texts and ids are
refused with nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from tenacity import wait_none

from runlane_sqs import (
    BulkFilter,
    BulkOperation,
    ConfigurationError,
    EventType,
    IllegalTransition,
    InvalidKeyError,
    ManualClock,
    OperationNotFound,
    OperationStatus,
    Runlane,
    RunlaneError,
    RunStatus,
    StorageUnavailable,
)
from runlane_sqs.core.bulk import LEASE, new_run_id_for
from runlane_sqs.core.model import Run
from runlane_sqs.runtime import budget
from tests.backends import Backend
from tests.behaviour.operator_support import FAIL, FLIP, OK, OTHER, Tasks, make_running, trigger
from tests.behaviour.worker_support import drain

FAILED = BulkFilter(task=FAIL)


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


def failed_runs(app: Runlane, clock: ManualClock, n: int) -> list[Run]:
    runs = [trigger(app, clock, FAIL, {"n": i}) for i in range(n)]
    assert drain(app) == n
    return runs


def all_runs(app: Runlane) -> list[Run]:
    found: list[Run] = []
    cursor: str | None = None
    while True:
        page = app.runs.list(limit=100, cursor=cursor)
        found.extend(page.runs)
        if (cursor := page.cursor) is None:
            return found


def links(app: Runlane, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in app.runs.events(run_id) if e.type is EventType.LINKED_RUN]


class Killed(BaseException):
    """The process doing the operation dies here (nothing catches it)."""


def test_a_dry_run_counts_what_the_operation_would_act_on_and_writes_nothing(
    app: Runlane, clock: ManualClock
) -> None:
    failed_runs(app, clock, 3)
    trigger(app, clock, FLIP, {"fail": True})
    trigger(app, clock, OK)
    drain(app)
    before = {r.id: r.seq for r in all_runs(app)}

    assert app.bulk.count("retry", FAILED).selected == 3
    every_failure = app.bulk.count("retry", BulkFilter())
    assert (every_failure.selected, every_failure.examined) == (4, 4)
    assert app.bulk.count("rerun", BulkFilter()).selected == 5  # failed and succeeded
    assert app.bulk.count("cancel", BulkFilter()).selected == 0
    assert {r.id: r.seq for r in all_runs(app)} == before
    assert app.bulk.list().operations == []


def test_a_bulk_retry_retries_each_selected_run_once_at_its_rate_and_records_who(
    app: Runlane, clock: ManualClock, tasks: Tasks
) -> None:
    sources = failed_runs(app, clock, 30)
    other = trigger(app, clock, FLIP, {"fail": True})
    drain(app)
    started = app.bulk.start(
        "retry", FAILED, actor="alice", reason="the partner API is back", rate=10
    )
    assert (started.status, started.selected_at_start, started.tally.acted) == (
        OperationStatus.RUNNING,
        30,
        0,
    )
    seen: list[BulkOperation] = []
    began = clock.now()

    done = app.bulk.run(started.id, progress=seen.append)

    assert done.status is OperationStatus.DONE
    assert (done.tally.acted, done.tally.skipped, done.tally.failed) == (30, 0, 0)
    assert clock.now() - began >= timedelta(seconds=2.9)  # 30 runs at 10 a second
    # its progress after each page: more acted on each time, readable from the record
    acted = [op.tally.acted for op in seen]
    assert acted == sorted(acted) and acted[-1] == 30 and len(seen) >= 3
    assert app.bulk.get(started.id) == done
    for source in sources:
        (link,) = links(app, source.id)
        assert link == {
            "run": new_run_id_for(started.id, source.id),
            "kind": "retry",
            "actor": "alice",
            "reason": "the partner API is back",
            "operation": started.id,
        }
    assert links(app, other.id) == []  # another task: not selected
    tasks.fail = False
    assert drain(app) == 30
    retried = [app.runs.get(new_run_id_for(started.id, s.id)) for s in sources]
    assert {r.status for r in retried} == {RunStatus.SUCCEEDED}
    assert [r.payload for r in retried] == [s.payload for s in sources]
    # a second operation skips the runs retried already
    again = app.bulk.run(app.bulk.start("retry", FAILED).id)
    assert (again.tally.acted, again.tally.skipped) == (0, 30)


def test_a_bulk_cancel_and_a_bulk_rerun_select_by_queue_status_time_and_failure(
    app: Runlane, clock: ManualClock
) -> None:
    early = trigger(app, clock, OTHER)
    middle = trigger(app, clock, OTHER)
    running = make_running(app, trigger(app, clock, OTHER))
    late = trigger(app, clock, OTHER)
    kept = trigger(app, clock, OK, delay=timedelta(hours=1))
    selection = BulkFilter(queue="other", created_before=late.created_at - timedelta(seconds=1))

    done = app.bulk.run(app.bulk.start("cancel", selection, actor="bob").id)

    assert done.tally.acted == 3
    statuses = {r.id: app.runs.get(r.id).status for r in (early, middle, running, late, kept)}
    assert statuses == {
        early.id: RunStatus.CANCELLED,
        middle.id: RunStatus.CANCELLED,
        running.id: RunStatus.CANCEL_REQUESTED,
        late.id: RunStatus.QUEUED,
        kept.id: RunStatus.QUEUED,
    }
    assert app.runs.events(early.id)[-1].data == {
        "actor": "bob",
        "reason": "",
        "operation": done.id,
    }
    # rerun the runs that failed with one type of error, and only those
    boom = trigger(app, clock, FLIP, {"fail": True})
    fine = trigger(app, clock, FLIP, {"fail": False})
    drain(app)
    assert app.runs.get(boom.id).failure.type.endswith(".Boom")  # type: ignore[union-attr]
    rerun = app.bulk.run(app.bulk.start("rerun", BulkFilter(task=FLIP, failure_type="Boom")).id)
    assert (rerun.tally.acted, rerun.tally.outside) == (1, 1)
    assert [link["kind"] for link in links(app, boom.id)] == ["rerun"]
    assert links(app, fine.id) == []


def test_a_bulk_retry_of_a_groups_children_retries_only_its_failed_children(
    app: Runlane, clock: ManualClock
) -> None:
    group = app.group([(FAIL, {"n": 1}), (OK, {"n": 2}), (FAIL, {"n": 3})])
    outside = trigger(app, clock, FAIL, {"n": 4})
    while drain(app):
        pass
    children = app.runs.children(group.id).runs
    failed = [c for c in children if c.status is RunStatus.FAILED]
    assert failed and len(failed) < len(children)  # one succeeded

    done = app.bulk.run(app.bulk.start("retry", BulkFilter(group=group.id)).id)

    assert (done.tally.acted, done.tally.outside) == (len(failed), len(children) - len(failed))
    assert all(len(links(app, c.id)) == 1 for c in failed)
    assert links(app, outside.id) == []
    with pytest.raises(RunlaneError):
        app.bulk.count("retry", BulkFilter(group="no-such-group"))


@pytest.mark.parametrize("where", ["after_acting", "between_create_and_link"])
def test_an_operation_whose_process_died_resumes_acting_on_no_run_twice(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sources = failed_runs(app, clock, 40)
    started = app.bulk.start("retry", FAILED, rate=100)
    calls = {"n": 0}

    def dies_on_the_33rd(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            made = real(*args, **kwargs)
            if calls["n"] == 33:
                raise Killed
            return made

        return call

    if where == "after_acting":
        monkeypatch.setattr(app.runs, "record_link", dies_on_the_33rd(app.runs.record_link))
    else:
        triggers = app.engine.triggers
        monkeypatch.setattr(triggers, "relaunch", dies_on_the_33rd(triggers.relaunch))
    with pytest.raises(Killed):
        app.bulk.run(started.id, owner="process-1")
    monkeypatch.undo()
    left = app.bulk.get(started.id)
    assert left.status is OperationStatus.RUNNING and left.owner == "process-1"
    assert left.tally.acted == 25 and len(left.pending) == 15  # the second page's runs
    # another process may not take it while its lease lasts, unless told its holder died
    with pytest.raises(IllegalTransition, match="being carried out by process-1"):
        app.bulk.run(started.id, owner="process-2")

    done = app.bulk.run(started.id, owner="process-2", force=True)

    assert (done.status, done.tally.acted, done.tally.skipped) == (OperationStatus.DONE, 40, 0)
    for source in sources:
        assert [link["run"] for link in links(app, source.id)] == [
            new_run_id_for(started.id, source.id)
        ]
    retries = [r for r in all_runs(app) if r.id not in {s.id for s in sources}]
    assert len(retries) == 40


def test_a_bulk_retry_whose_writes_meet_throttling_sends_them_again_and_links_each_run(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry's new run whose answer was lost, then a link on its source that met
    throttling, are each sent again within their budget: every source is linked once to
    its one new run, and the tally counts them acted on. Sent once, the throttled link
    counted its run failed although its new run was made and published, and left the
    source unlinked (a later retry of it made a second new run). Found by the simulation
    (``make simulate SEED=36``: ``bulk_operations_complete``)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    sources = failed_runs(app, clock, 3)
    started = app.bulk.start("retry", FAILED)
    relaunch, record_link = app.engine.triggers.relaunch, app.runs.record_link
    failures: list[str] = []

    def lost_once(*args: Any, **kwargs: Any) -> Run:
        made = relaunch(*args, **kwargs)
        if not failures:
            failures.append("relaunch")
            raise StorageUnavailable("the answer was lost")
        return made

    def throttled_once(*args: Any, **kwargs: Any) -> None:
        if failures == ["relaunch"]:
            failures.append("link")
            raise StorageUnavailable("DynamoDB is unavailable: ThrottlingException")
        record_link(*args, **kwargs)

    monkeypatch.setattr(app.engine.triggers, "relaunch", lost_once)
    monkeypatch.setattr(app.runs, "record_link", throttled_once)

    done = app.bulk.run(started.id)

    assert failures == ["relaunch", "link"]
    assert (done.tally.acted, done.tally.failed, done.last_error) == (3, 0, None)
    for source in sources:
        assert [link["run"] for link in links(app, source.id)] == [
            new_run_id_for(started.id, source.id)
        ]
    assert len(all_runs(app)) == 6  # each source and its one retry


def test_an_operator_stops_an_operation_and_another_process_resumes_it_once_its_lease_ends(
    app: Runlane, clock: ManualClock
) -> None:
    failed_runs(app, clock, 60)
    started = app.bulk.start("retry", FAILED, rate=50)

    def stop_after_the_first_page(operation: BulkOperation) -> None:
        if operation.tally.acted:
            app.bulk.stop(operation.id)

    stopped = app.bulk.run(started.id, owner="a", progress=stop_after_the_first_page)
    assert stopped.status is OperationStatus.STOPPED
    assert 0 < stopped.tally.acted < 60
    resumed = app.bulk.run(started.id, owner="b")  # stopped: anyone may resume it
    assert (resumed.status, resumed.tally.acted) == (OperationStatus.DONE, 60)
    with pytest.raises(IllegalTransition, match="is done"):
        app.bulk.run(started.id)
    with pytest.raises(IllegalTransition, match="is done"):
        app.bulk.stop(started.id)

    # a process that dies holding an operation: the next may take it once its lease ended
    held = app.bulk.start("rerun", BulkFilter(task=OK))
    app.store.operations.put_operation(replace(held, owner="gone", lease_until=clock.now() + LEASE))
    with pytest.raises(IllegalTransition):
        app.bulk.run(held.id)
    clock.advance(LEASE)
    assert app.bulk.run(held.id).status is OperationStatus.DONE


def test_operations_are_listed_newest_first_page_by_page(app: Runlane, clock: ManualClock) -> None:
    ids = []
    for _ in range(5):
        clock.advance(1)
        ids.append(app.bulk.start("cancel", BulkFilter(task=OK)).id)
    first = app.bulk.list(limit=3)
    assert [o.id for o in first.operations] == ids[::-1][:3] and first.cursor
    second = app.bulk.list(limit=3, cursor=first.cursor)
    assert [o.id for o in second.operations] == ids[::-1][3:] and second.cursor is None
    assert [o.id for o in second] == ids[::-1][3:] and len(second) == 2  # a page iterates


@pytest.mark.parametrize(
    ("action", "selection", "options", "error"),
    [
        ("explode", BulkFilter(), {}, "unknown bulk action"),
        ("retry", BulkFilter(statuses=(RunStatus.QUEUED,)), {}, "retry acts on runs that are"),
        ("cancel", BulkFilter(statuses=(RunStatus.SUCCEEDED,)), {}, "not succeeded"),
        ("rerun", BulkFilter(task="bad task name"), {}, "task name"),
        ("retry", BulkFilter(queue="a#b"), {}, "queue name"),
        ("retry", BulkFilter(failure_type="Boom\x00"), {}, "control character"),
        ("retry", BulkFilter(), {"rate": 0}, "rate must be above 0"),
        ("retry", BulkFilter(), {"rate": 1e9}, "at most 1000"),
        ("retry", BulkFilter(), {"reason": "fixed \u202e<script>"}, "format character"),
        ("retry", BulkFilter(), {"actor": ""}, "must not be empty"),
        ("retry", BulkFilter(), {"reason": "x" * 501}, "limit is 500"),
    ],
)
def test_a_bad_operation_is_refused_with_nothing_stored(
    app: Runlane, action: str, selection: BulkFilter, options: dict[str, Any], error: str
) -> None:
    with pytest.raises((ConfigurationError, InvalidKeyError, RunlaneError), match=error):
        app.bulk.start(action, selection, **options)
    assert app.bulk.list().operations == []


def test_an_inverted_created_range_and_a_bad_operation_id_are_refused(
    app: Runlane, clock: ManualClock
) -> None:
    now = clock.now()
    inverted = BulkFilter(created_after=now, created_before=now - timedelta(days=1))
    with pytest.raises(ConfigurationError, match="later than created_before"):
        app.bulk.count("retry", inverted)
    for bad in ("../etc", "20261205T120000-1a2b3c4d\n", "<b>x</b>", "\ud800"):
        with pytest.raises(RunlaneError, match="is not a bulk operation id"):
            app.bulk.get(bad)
    with pytest.raises(OperationNotFound):
        app.bulk.get("20261205T120000-1a2b3c4d")
