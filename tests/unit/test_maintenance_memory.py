"""Maintenance passes over the in-memory app, with time moved by hand (no sleeps).

Semantics 11, 12 and 15: due work is published by maintenance (not earlier), scans are
bounded and resume from cursors, candidates that changed are passed over, wakeups are
not republished before the republish delay, a failed eager publish is repaired, and
cancellation of a waiting run is immediate.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, IllegalTransition, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.memory.store import InMemoryRunStore
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run
from runlane_sqs.core.wakeup import parse_wakeup
from runlane_sqs.engine.maintenance import (
    JOB_CANCELLATIONS,
    JOB_DEADLINES,
    JOB_DUE,
    JOB_EXPIRED,
    JOBS,
    MaintenanceConfig,
    PassReport,
)
from runlane_sqs.testing import ManualClock, in_memory_app

TASK = "maint.work"
QUEUE = "default"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    app = in_memory_app(clock=clock)
    calls: list[Any] = []

    @app.task(name=TASK)
    def work(ctx: TaskContext, payload: Any) -> Any:
        calls.append(ctx.run_id)
        return {"ok": payload}

    app.calls = calls  # type: ignore[attr-defined]
    return app


def transport(app: Runlane) -> InMemoryTransport:
    assert isinstance(app.transport, InMemoryTransport)
    return app.transport


def store(app: Runlane) -> InMemoryRunStore:
    assert isinstance(app.store, InMemoryRunStore)
    return app.store


def calls(app: Runlane) -> list[str]:
    return app.calls  # type: ignore[attr-defined,no-any-return]


def drain(app: Runlane) -> int:
    return app.worker(wait_seconds=0).drain()


def take_wakeups(app: Runlane) -> Counter[str]:
    """Remove every visible wakeup from the queue; count them by run id."""
    queue = transport(app)
    messages = queue.receive(QUEUE, 10_000, 0)
    queue.ack(messages)
    return Counter(parse_wakeup(m.body).run_id for m in messages)


def published(report: PassReport) -> int:
    return report.jobs[JOB_DUE].published


def due_runs(app: Runlane, clock: ManualClock, count: int) -> list[Run]:
    """``count`` runs due now whose wakeups were never published (delayed past SQS's
    limit, so only maintenance can publish them)."""
    runs = [app.trigger(TASK, {"n": n}, delay=timedelta(hours=1)) for n in range(count)]
    assert transport(app).depth(QUEUE) == 0
    clock.advance(timedelta(hours=1))
    return runs


def shard(run_id: str) -> int:
    return int(run_id[:4], 16) % keys.AGENDA_SHARDS


# delayed runs ---------------------------------------------------------------------------


def test_a_three_hour_delay_is_not_run_early(app: Runlane, clock: ManualClock) -> None:
    run = app.trigger(TASK, {"n": 1}, delay=timedelta(hours=3))
    assert run.status is RunStatus.QUEUED
    assert transport(app).depth(QUEUE) == 0
    assert drain(app) == 0

    clock.advance(timedelta(hours=3) - timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert published(report) == 0
    assert report.jobs[JOB_DUE].examined == 0
    assert transport(app).depth(QUEUE) == 0
    assert drain(app) == 0
    assert calls(app) == []

    clock.advance(timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert published(report) == 1
    assert drain(app) == 1
    assert calls(app) == [run.id]
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.SUCCEEDED
    assert [e.type for e in app.runs.events(run.id)] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_short_delay_is_published_at_once_and_not_again_by_maintenance(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None, delay=timedelta(minutes=10))
    assert transport(app).depth(QUEUE) == 1
    clock.advance(timedelta(minutes=10))
    assert published(app.maintenance.run_pass()) == 0
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


# bounded scans --------------------------------------------------------------------------


def test_bounded_passes_publish_every_due_run_exactly_once(
    app: Runlane, clock: ManualClock
) -> None:
    limit = 8
    app.maintenance.config = MaintenanceConfig(limit_per_job=limit)
    runs = due_runs(app, clock, 12)
    by_shard = Counter(shard(r.id) for r in runs)
    per_partition = limit // keys.AGENDA_SHARDS

    wakeups: Counter[str] = Counter()
    passes = 0
    while sum(wakeups.values()) < len(runs) and passes < 20:
        report = app.maintenance.run_pass()
        passes += 1
        job = report.jobs[JOB_DUE]
        assert job.examined <= limit
        assert job.published <= limit
        assert job.published == job.acted
        wakeups += take_wakeups(app)
    assert wakeups == Counter({r.id: 1 for r in runs})
    assert passes >= math.ceil(len(runs) / limit)
    assert passes == max(math.ceil(n / per_partition) for n in by_shard.values())

    for _ in range(3):
        assert published(app.maintenance.run_pass()) == 0
    assert take_wakeups(app) == Counter()
    assert drain(app) == 0  # every wakeup was taken off the queue above


def test_a_scan_resumes_from_its_cursor(app: Runlane, clock: ManualClock) -> None:
    app.maintenance.config = MaintenanceConfig(limit_per_job=4)
    due_runs(app, clock, 12)
    report = app.maintenance.run_pass()
    assert published(report) <= 4
    assert report.cursors, "a partition with more due runs than the budget keeps a cursor"
    assert set(report.cursors) <= set(keys.agenda_partitions("test", "due"))
    assert store(app).load_cursors() == report.cursors
    json.dumps(report.cursors)


def test_runs_cancelled_between_passes_are_passed_over(app: Runlane, clock: ManualClock) -> None:
    app.maintenance.config = MaintenanceConfig(limit_per_job=4)
    runs = due_runs(app, clock, 12)
    app.maintenance.run_pass()
    first = take_wakeups(app)
    assert 1 <= sum(first.values()) <= 4
    unpublished = [r for r in runs if r.id not in first]
    cancelled = {r.id for r in unpublished[: len(unpublished) // 2]}
    for run_id in cancelled:
        assert app.runs.cancel(run_id, reason="no longer needed").status is RunStatus.CANCELLED

    wakeups = Counter(first)
    for _ in range(15):
        app.maintenance.run_pass()
        wakeups += take_wakeups(app)
    expected = {r.id: 1 for r in runs if r.id not in cancelled}
    assert wakeups == Counter(expected)
    for run_id in cancelled:
        run = app.runs.get(run_id)
        assert run.status is RunStatus.CANCELLED
        assert run.publishes == 0
        assert app.runs.events(run_id)[-1].type is EventType.CANCELLED


def test_a_stale_index_entry_loses_its_conditional_write_and_publishes_nothing(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agenda index is eventually consistent: a pass may list a run as it was before
    a change. The conditional write re-checks it, so the change is preserved."""
    runs = due_runs(app, clock, 3)
    listed = {r.id: app.runs.get(r.id) for r in runs}
    cancelled = runs[0].id
    app.runs.cancel(cancelled)
    real_page = store(app).agenda_page

    def stale_page(
        partition: str, until: Any, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        page, cursor = real_page(partition, until, limit, cursor)
        ids = {r.id for r in page}
        if partition == keys.agenda_pk("test", "due", cancelled) and cancelled not in ids:
            page = [listed[cancelled], *page]
        return page, cursor

    monkeypatch.setattr(store(app), "agenda_page", stale_page)
    report = app.maintenance.run_pass()
    job = report.jobs[JOB_DUE]
    assert job.conflicts == 1
    assert job.published == 2
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs[1:]})
    run = app.runs.get(cancelled)
    assert run.status is RunStatus.CANCELLED
    assert run.publishes == 0
    assert [e.type for e in app.runs.events(cancelled)] == [
        EventType.TRIGGERED,
        EventType.CANCELLED,
    ]


def test_a_pass_never_publishes_or_touches_terminal_runs(app: Runlane, clock: ManualClock) -> None:
    runs = [app.trigger(TASK, {"n": n}) for n in range(3)]
    assert drain(app) == 3
    clock.advance(timedelta(days=1))
    before = {r.id: app.runs.get(r.id) for r in runs}
    report = app.maintenance.run_pass()
    assert all(job.examined == 0 for job in report.jobs.values())
    assert transport(app).depth(QUEUE) == 0
    assert {r.id: app.runs.get(r.id) for r in runs} == before


# republish throttle ---------------------------------------------------------------------


def test_a_due_run_is_republished_only_after_the_republish_delay(
    app: Runlane, clock: ManualClock
) -> None:
    after = app.config.republish.after
    assert after == timedelta(minutes=5)
    run = app.trigger(TASK, None)
    assert take_wakeups(app) == Counter({run.id: 1})  # the eager publish, then "lost"

    assert published(app.maintenance.run_pass()) == 0
    clock.advance(after - timedelta(seconds=1))
    assert published(app.maintenance.run_pass()) == 0

    clock.advance(timedelta(seconds=1))
    assert published(app.maintenance.run_pass()) == 1
    assert published(app.maintenance.run_pass()) == 0  # back to back: no double publish
    assert take_wakeups(app) == Counter({run.id: 1})
    assert app.runs.get(run.id).publishes == 1

    # the n-th maintenance publish is trusted for after * 2**n: 5, 10, 20 minutes
    for trusted, count in ((after, 2), (2 * after, 3), (4 * after, 4)):
        clock.advance(trusted - timedelta(seconds=1))
        assert published(app.maintenance.run_pass()) == 0
        clock.advance(timedelta(seconds=1))
        assert published(app.maintenance.run_pass()) == 1
        assert published(app.maintenance.run_pass()) == 0
        assert take_wakeups(app) == Counter({run.id: 1})
        assert app.runs.get(run.id).publishes == count

    stored = app.runs.get(run.id)
    assert stored.seq == 1, "publishing appends no event"
    assert [e.type for e in app.runs.events(run.id)] == [EventType.TRIGGERED]


def test_duplicate_wakeups_from_republishing_run_the_run_once(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None)
    clock.advance(app.config.republish.after)
    assert published(app.maintenance.run_pass()) == 1
    assert transport(app).depth(QUEUE) == 2
    assert drain(app) == 1
    assert calls(app) == [run.id]
    assert transport(app).depth(QUEUE) == 0
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


# eager publish failure ------------------------------------------------------------------


def test_a_failed_eager_publish_is_repaired_by_the_next_pass(
    app: Runlane, clock: ManualClock
) -> None:
    transport(app).fail_publish = True
    run = app.trigger(TASK, {"n": 1})
    transport(app).fail_publish = False
    assert run.created
    assert transport(app).depth(QUEUE) == 0
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.wake_at is None, "listed as due now, not after the republish delay"

    report = app.maintenance.run_pass()
    assert published(report) == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_a_failed_publish_of_trigger_many_is_repaired(app: Runlane) -> None:
    transport(app).fail_publish = True
    runs = app.trigger_many(TASK, [{"n": n} for n in range(5)])
    transport(app).fail_publish = False
    assert transport(app).depth(QUEUE) == 0
    assert published(app.maintenance.run_pass()) == 5
    assert drain(app) == 5
    assert {app.runs.get(r.id).status for r in runs} == {RunStatus.SUCCEEDED}


def test_a_failed_maintenance_publish_is_retried_by_a_later_pass(
    app: Runlane, clock: ManualClock
) -> None:
    runs = due_runs(app, clock, 2)
    transport(app).fail_publish = True
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].acted == 2
    assert published(report) == 0
    transport(app).fail_publish = False
    report = app.maintenance.run_pass()
    assert published(report) == 2
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs})


# cancellation ---------------------------------------------------------------------------


def test_cancel_of_a_queued_run_is_immediate_and_its_wakeup_is_ignored(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None)
    assert transport(app).depth(QUEUE) == 1
    cancelled = app.runs.cancel(run.id, reason="typo", actor="alice")
    assert cancelled.status is RunStatus.CANCELLED
    events = app.runs.events(run.id)
    assert events[-1].type is EventType.CANCELLED
    assert events[-1].data == {"actor": "alice", "reason": "typo"}

    assert drain(app) == 0
    assert calls(app) == []
    assert transport(app).depth(QUEUE) == 0
    clock.advance(timedelta(hours=2))
    assert published(app.maintenance.run_pass()) == 0
    assert app.runs.get(run.id).status is RunStatus.CANCELLED


def test_cancel_of_a_delayed_run_keeps_maintenance_from_publishing_it(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None, delay=timedelta(hours=2))
    app.runs.cancel(run.id)
    clock.advance(timedelta(hours=3))
    report = app.maintenance.run_pass()
    assert published(report) == 0
    assert drain(app) == 0
    assert calls(app) == []


@pytest.mark.parametrize("outcome", ["succeeded", "cancelled"])
def test_cancel_of_a_finished_run_raises(app: Runlane, outcome: str) -> None:
    run = app.trigger(TASK, None)
    if outcome == "succeeded":
        assert drain(app) == 1
    else:
        app.runs.cancel(run.id)
    before = app.runs.get(run.id)
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id)
    assert app.runs.get(run.id) == before


def test_an_abandoned_cancel_request_is_finalized_after_lease_expiry(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None)
    claim = machine.claim_lease(
        app.runs.get(run.id),
        now=clock.now(),
        owner="dead-worker",
        token="tok-dead",
        duration=app.config.lease_duration,
    )
    assert not isinstance(claim, machine.Skip)
    app.store.apply(claim)
    requested = app.runs.cancel(run.id, reason="stop")
    assert requested.status is RunStatus.CANCEL_REQUESTED

    assert app.maintenance.run_pass().jobs[JOB_CANCELLATIONS].acted == 0
    clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_CANCELLATIONS].acted == 1
    assert report.jobs[JOB_EXPIRED].acted == 0
    assert app.runs.get(run.id).status is RunStatus.CANCELLED
    assert drain(app) == 0


def test_an_expired_lease_is_recovered_and_the_same_run_completes(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None)
    take_wakeups(app)
    claim = machine.claim_lease(
        app.runs.get(run.id),
        now=clock.now(),
        owner="dead-worker",
        token="tok-dead",
        duration=app.config.lease_duration,
    )
    assert not isinstance(claim, machine.Skip)
    app.store.apply(claim)
    clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 1
    assert report.jobs[JOB_EXPIRED].published == 1
    assert report.jobs[JOB_DEADLINES].acted == 0
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.SUCCEEDED, 2)
    assert [e.type for e in app.runs.events(run.id)] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


# the report -----------------------------------------------------------------------------


def test_the_pass_report_is_json(app: Runlane, clock: ManualClock) -> None:
    app.maintenance.config = MaintenanceConfig(limit_per_job=4)
    due_runs(app, clock, 6)
    report = app.maintenance.run_pass(time_budget_seconds=30)
    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert set(data["jobs"]) == set(JOBS)
    assert {JOB_DUE, JOB_EXPIRED, JOB_DEADLINES, JOB_CANCELLATIONS} <= set(JOBS)
    assert data["jobs"][JOB_DUE]["published"] == published(report) >= 1
    assert set(data["jobs"][JOB_DUE]) == {"examined", "acted", "published", "skipped", "conflicts"}
    assert data["started_at"] == clock.now().isoformat()
    assert data["out_of_time"] is False
    assert isinstance(data["duration_ms"], int)
