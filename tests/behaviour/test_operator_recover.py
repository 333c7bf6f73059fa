"""Operators can recover runs (``app.runs``, ``app.idempotency``) on every backend, and
every control action records who did it and why. Cancel ends a waiting run at once and
asks a running one to stop. Retry (of a failed run) and rerun (of any finished run)
create a new run of the same task and payload, linked both ways, so the audit trail
survives; the source keeps its status. Prune deletes finished runs older than a cutoff
(and only those) in bounded batches that resume from a cursor, and frees their keys;
on DynamoDB it deletes every item of a pruned run and never scans. ``idempotency.reset``
frees an idempotency key for the next trigger."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    IllegalTransition,
    ManualClock,
    Runlane,
    RunlaneError,
    RunNotFound,
    RunStatus,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.api.runs import PruneReport
from runlane_sqs.core.model import Run
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.operator_support import (
    FAIL,
    OK,
    OTHER,
    Tasks,
    make_running,
    one_of_each,
    trigger,
)
from tests.behaviour.worker_support import drain
from tests.emulators import count_requests, scan_items

UNFINISHED = (RunStatus.QUEUED, RunStatus.RELEASED, RunStatus.RUNNING)
FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


def failed_run(app: Runlane, clock: ManualClock, payload: Any = None) -> Run:
    run = trigger(app, clock, FAIL, payload)
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    return stored


def stored_runs(app: Runlane) -> dict[str, Run]:
    """Every run of the environment, by id (read page by page through ``app.runs.list``)."""
    runs: dict[str, Run] = {}
    cursor: str | None = None
    for _ in range(100):
        page = app.runs.list(cursor=cursor, limit=100)
        runs.update((r.id, r) for r in page.runs)
        cursor = page.cursor
        if cursor is None:
            return runs
    raise AssertionError("pagination did not end")


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    return [e.type for e in app.runs.events(run_id)]


def assert_pruned(app: Runlane, runs: list[Run]) -> None:
    for run in runs:
        with pytest.raises(RunNotFound):
            app.runs.get(run.id)
        with pytest.raises(RunNotFound):
            app.runs.events(run.id)


# cancel -------------------------------------------------------------------------------


def test_cancel_of_a_queued_run_records_actor_and_reason(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK)
    clock.advance(5)
    cancelled = app.runs.cancel(run.id, reason="customer asked", actor="alice")
    assert cancelled.status is RunStatus.CANCELLED
    assert app.runs.get(run.id).status is RunStatus.CANCELLED
    last = app.runs.events(run.id)[-1]
    assert last.type is EventType.CANCELLED
    assert last.data == {"actor": "alice", "reason": "customer asked"}
    assert last.at == clock.now()
    assert drain(app) == 0  # its wakeup is stale now
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id)


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
    run = trigger(app, clock, OK, singleton_key="user-1", delay=3600)
    assert app.runs.find_active(OK, "user-1") == app.runs.get(run.id)
    app.runs.cancel(run.id)
    assert app.runs.find_active(OK, "user-1") is None
    again = trigger(app, clock, OK, singleton_key="user-1")
    assert again.created and again.id != run.id


# retry --------------------------------------------------------------------------------


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
    app: Runlane, clock: ManualClock, tasks: Tasks
) -> None:
    source = failed_run(app, clock, {"order": 42})
    tasks.fail = False
    clock.advance(30)
    retry = app.runs.retry(source.id, reason="downstream fixed", actor="bob")
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
    assert app.runs.get(source.id).status is RunStatus.FAILED
    assert event_types(app, source.id)[-1] is EventType.LINKED_RUN
    # the retry succeeded: only a rerun of it is possible now
    with pytest.raises(IllegalTransition):
        app.runs.retry(retry.id)
    rerun = app.runs.rerun(retry.id)
    assert (rerun.source_run_id, rerun.source_kind) == (retry.id, "rerun")
    assert drain(app) == 1
    assert app.runs.get(rerun.id).status is RunStatus.SUCCEEDED


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
    count = len(stored_runs(app))
    with pytest.raises(IllegalTransition):
        app.runs.retry(run.id)
    assert app.runs.get(run.id) == before
    assert len(stored_runs(app)) == count


def test_retry_of_an_unknown_run_raises_run_not_found(app: Runlane) -> None:
    with pytest.raises(RunNotFound):
        app.runs.retry("d" * 32)


# rerun --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", FINISHED)
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


@pytest.mark.parametrize("status", UNFINISHED)
def test_rerun_of_an_unfinished_run_is_illegal(
    app: Runlane, clock: ManualClock, status: RunStatus
) -> None:
    run = one_of_each(app, clock)[status]
    before = app.runs.get(run.id)
    count = len(stored_runs(app))
    with pytest.raises(IllegalTransition):
        app.runs.rerun(run.id)
    assert app.runs.get(run.id) == before
    assert len(stored_runs(app)) == count


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


def test_an_operator_app_that_registers_no_task_retries_and_reruns_from_the_stored_run(
    app: Runlane, clock: ManualClock, tasks: Tasks
) -> None:
    """Operators need not import the producing app's code: retry and rerun take the task
    name, queue and payload from the stored run, and the producer's workers run them."""
    failed = failed_run(app, clock, {"order": 7})
    succeeded = trigger(app, clock, OK, {"order": 8})
    assert drain(app) == 1
    operator = Runlane(
        environment=app.config.environment,
        clock=clock,
        store=app.store,
        transport=app.transport,
    )
    assert operator.tasks.names() == []

    retried = operator.runs.retry(failed.id, actor="ops", reason="mail server back")
    rerun = operator.runs.rerun(succeeded.id, actor="ops", reason="resend")

    assert (retried.task, retried.queue, retried.payload) == (FAIL, "default", {"order": 7})
    assert (rerun.task, rerun.queue, rerun.payload) == (OK, "default", {"order": 8})
    assert retried.source_run_id == failed.id
    assert rerun.source_run_id == succeeded.id
    assert EventType.LINKED_RUN in event_types(app, failed.id)
    assert EventType.LINKED_RUN in event_types(app, succeeded.id)
    tasks.fail = False
    assert drain(app) == 2  # the producer's worker knows both tasks
    assert app.runs.get(retried.id).result == {"recovered": {"order": 7}}
    assert app.runs.get(rerun.id).result == {"echo": {"order": 8}}


def test_a_retry_that_cannot_create_its_run_leaves_no_link_behind(
    app: Runlane, clock: ManualClock, tasks: Tasks
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
    tasks.register(operator)
    with pytest.raises(RunlaneError):
        operator.runs.retry(source.id, reason="try again")
    assert list(stored_runs(app)) == [source.id]
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

    assert_pruned(app, [old[s] for s in FINISHED])
    for status in UNFINISHED:
        assert app.runs.get(old[status].id).status is status
    assert set(stored_runs(app)) == {old[s].id for s in UNFINISHED} | {r.id for r in recent}


def test_prune_with_an_age(app: Runlane, clock: ManualClock) -> None:
    old, recent = aged(app, clock)
    assert app.runs.prune(older_than=timedelta(days=2)).deleted == 0
    report = app.runs.prune(older_than=3600)  # seconds
    assert report.deleted == 3
    unfinished = {old[s].id for s in UNFINISHED}
    assert set(stored_runs(app)) == unfinished | {r.id for r in recent}


def test_prune_keeps_a_run_created_after_the_cutoff(app: Runlane, clock: ManualClock) -> None:
    first = trigger(app, clock, OK)
    second = trigger(app, clock, OK)
    assert drain(app) == 2
    report = app.runs.prune(older_than=first.created_at)
    assert report.deleted == 1
    assert list(stored_runs(app)) == [second.id]


def test_prune_is_bounded_and_resumes_from_its_cursor(app: Runlane, clock: ManualClock) -> None:
    finished = [trigger(app, clock, OK, i) for i in range(4)]
    finished += [trigger(app, clock, FAIL, i) for i in range(3)]
    assert drain(app) == 7
    cancelled = trigger(app, clock, OK, "c", delay=3600)
    app.runs.cancel(cancelled.id)
    finished.append(cancelled)
    keep = trigger(app, clock, OK, "queued", delay=3600)
    clock.advance(timedelta(days=2))
    recent = trigger(app, clock, OK, "recent")
    assert drain(app) == 1

    reports = [app.runs.prune(older_than=timedelta(days=1), limit=3)]
    assert (reports[0].examined, reports[0].deleted) == (3, 3)
    assert reports[0].cursor is not None
    assert len(stored_runs(app)) == 7
    while reports[-1].cursor is not None:
        assert len(reports) < 10
        reports.append(
            app.runs.prune(older_than=timedelta(days=1), limit=3, cursor=reports[-1].cursor)
        )
    assert all(r.deleted <= 3 for r in reports)
    assert sum(r.deleted for r in reports) == len(finished) == 8
    assert set(stored_runs(app)) == {keep.id, recent.id}
    assert_pruned(app, finished)
    assert app.runs.get(keep.id).status is RunStatus.QUEUED
    assert [r.id for r in app.runs.list(status="succeeded").runs] == [recent.id]


def test_prune_of_chosen_statuses_only(app: Runlane, clock: ManualClock) -> None:
    old = one_of_each(app, clock)
    clock.advance(timedelta(days=1))
    report = app.runs.prune(older_than=timedelta(hours=1), statuses=["cancelled"])
    assert report.deleted == 1
    assert_pruned(app, [old[RunStatus.CANCELLED]])
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
    assert set(stored_runs(app)) == {r.id for r in old.values()}


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


def run_item_ids(dynamodb: Any, app: Runlane) -> set[str]:
    """The run ids that still have an item of the run's partition in the table."""
    prefix = keys.run_pk(app.config.environment, "")
    return {
        item["pk"]["S"][len(prefix) :]
        for item in scan_items(dynamodb, app.config.table)
        if item["pk"]["S"].startswith(prefix)
    }


@ONLY_AWS
def test_prune_deletes_every_item_of_a_pruned_run_and_never_scans(
    app: Runlane, clock: ManualClock, dynamodb: Any
) -> None:
    old = one_of_each(app, clock)
    trigger(app, clock, OK, "k", idempotency_key="order-1")
    assert drain(app) == 1
    clock.advance(timedelta(days=1))
    counts = count_requests(app.client("dynamodb"))

    report = app.runs.prune(older_than=timedelta(hours=1), limit=100)

    assert report.deleted == 4
    assert "Scan" not in counts
    assert set(counts) <= {"Query", "BatchGetItem", "DeleteItem"}
    assert counts["DeleteItem"] == 5  # four runs and the idempotency key one of them held
    assert run_item_ids(dynamodb, app) == {old[s].id for s in UNFINISHED}
    key = keys.key_item_key(keys.idempotency_pk(app.config.environment, OK, "order-1"))
    assert "Item" not in dynamodb.get_item(TableName=app.config.table, Key=key)


# idempotency reset --------------------------------------------------------------------


def test_idempotency_reset_frees_the_key(app: Runlane, clock: ManualClock) -> None:
    run = trigger(app, clock, OK, "p", idempotency_key="order-5")
    assert drain(app) == 1
    assert trigger(app, clock, OK, "p", idempotency_key="order-5").id == run.id

    app.idempotency.reset(OK, "order-5")
    assert app.runs.find_current(OK, "order-5") is None
    again = trigger(app, clock, OK, "p", idempotency_key="order-5")
    assert again.created is True and again.id != run.id
    assert app.runs.find_current(OK, "order-5") == app.runs.get(again.id)
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
