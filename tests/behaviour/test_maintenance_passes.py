"""How a maintenance pass works through its candidates, on every backend with time moved
by hand.

A pass is bounded: each job examines at most its budget, split over the agenda
partitions, and the next pass resumes from the opaque cursors the last one saved, until
every due run was published exactly once. A candidate that changed after it was listed
(cancelled, already published, already recovered by another pass) loses its conditional
write and is passed over; terminal runs are never touched. Two passes may run at once
without double effects. A pass reads the agenda index, never the table, so its cost
follows the due work however many finished runs the table holds. Its report is JSON.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, agenda_pk, status_partitions
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.indexes import AGENDA_SHARDS, SCANNED_KINDS
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.engine.reports import (
    JOB_CANCELLATIONS,
    JOB_DEADLINES,
    JOB_DUE,
    JOB_EXPIRED,
    JOBS,
    PassReport,
)
from runlane_sqs.ports.store import RunStore
from tests.apps.recovery_tasks import PLAIN_TASK, register_recovery
from tests.backends import Backend
from tests.behaviour.maintenance_support import (
    QUEUE,
    claim,
    due_runs,
    published,
    resend,
    run_ids_by_shard,
    store_due_run,
    take_wakeups,
)
from tests.behaviour.worker_support import drain, event_types
from tests.emulators import count_requests

TERMINAL_RUNS = 1_000
"""Enough that a Scan would show; `make bench` measures passes over 100,000 runs."""
DUE_RUNS = 10


@pytest.fixture
def app(backend: Backend) -> Runlane:
    """An app on the test's backend with the tasks of the recovery worker apps."""
    return backend.app(register=register_recovery)


class StoreHandle:
    """Another process's handle on an in-memory store: its own object over the same runs
    (so a test can change what one process sees, as with its own DynamoDB client)."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def another_process(backend: Backend, app: Runlane) -> Runlane:
    """A second app on ``app``'s table and queues, as another process would build it."""
    if backend.real:
        return backend.app(register=register_recovery)
    other = Runlane(
        environment=app.config.environment,
        clock=backend.clock,
        store=StoreHandle(app.store),
        transport=app.transport,
    )
    register_recovery(other)
    return other


def listed_before(app: Runlane, kind: str) -> Callable[..., tuple[list[Run], None]]:
    """What one pass's scan of ``kind`` sees now, replayed later: a pass that listed its
    candidates just before another pass wrote them."""
    now = app.clock.now()
    real_page = app.store.agenda_page
    pages = {
        partition: real_page(partition, now, 1000, None)[0]
        for partition in agenda_partitions(app.config.environment, kind)
    }

    def replay(partition: str, until: Any, limit: int, cursor: str | None) -> Any:
        if partition in pages:
            return pages.pop(partition), None
        return real_page(partition, until, limit, cursor)

    return replay


def concurrent_passes(*apps: Runlane) -> list[PassReport]:
    """One maintenance pass per app, all started at the same moment in threads."""
    barrier = threading.Barrier(len(apps))
    reports: list[PassReport] = []
    errors: list[BaseException] = []

    def one_pass(instance: Runlane) -> None:
        try:
            barrier.wait(timeout=10)
            reports.append(instance.maintenance.run_pass())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_pass, args=(a,)) for a in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(reports) == len(apps)
    return reports


# bounded passes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "per_pass"),
    [
        pytest.param(AGENDA_SHARDS, [AGENDA_SHARDS] * 3, id="one-per-partition"),
        pytest.param(2 * AGENDA_SHARDS, [2 * AGENDA_SHARDS, AGENDA_SHARDS], id="two-per-partition"),
    ],
)
def test_bounded_passes_resume_from_cursors_and_publish_every_due_run_once(
    app: Runlane, limit: int, per_pass: list[int]
) -> None:
    """Three due runs in each agenda partition; the budget is split between partitions."""
    app.maintenance.bounds = MaintenanceConfig(limit_per_job=limit)
    runs = [store_due_run(app, run_id) for run_id in run_ids_by_shard(3)]
    assert len(runs) == 3 * AGENDA_SHARDS

    wakeups: Counter[str] = Counter()
    for n, expected in enumerate(per_pass):
        report = app.maintenance.run_pass()
        job = report.jobs[JOB_DUE]
        assert job.examined <= limit
        assert job.published == job.acted == expected
        if n == 0:  # every partition has more due runs than its share of the budget
            assert set(report.cursors) == set(agenda_partitions(app.config.environment, "run"))
            assert app.store.progress.load_cursors() == report.cursors
            json.dumps(report.cursors)
        batch = take_wakeups(app)
        assert sum(batch.values()) == expected
        assert not set(batch) & set(wakeups), "a run published by an earlier pass"
        wakeups += batch
    assert wakeups == Counter({r.id: 1 for r in runs})

    for _ in range(3):
        report = app.maintenance.run_pass()
        assert published(report) == 0
    assert report.cursors == {}, "a scan that reached the end keeps no cursor"
    assert app.store.progress.load_cursors() == {}
    assert take_wakeups(app) == Counter()
    assert drain(app) == 0  # every wakeup was taken off the queue above


def test_runs_cancelled_between_passes_are_passed_over(app: Runlane, clock: ManualClock) -> None:
    app.maintenance.bounds = MaintenanceConfig(limit_per_job=AGENDA_SHARDS)
    runs = [store_due_run(app, run_id) for run_id in run_ids_by_shard(2)]
    app.maintenance.run_pass()
    first = take_wakeups(app)
    assert sum(first.values()) == AGENDA_SHARDS  # one of each partition
    unpublished = [r for r in runs if r.id not in first]
    cancelled = {r.id for r in unpublished[: len(unpublished) // 2]}
    for run_id in cancelled:
        assert app.runs.cancel(run_id, reason="no longer needed").status is RunStatus.CANCELLED

    wakeups = Counter(first)
    for _ in range(15):
        app.maintenance.run_pass()
        wakeups += take_wakeups(app)
    assert wakeups == Counter({r.id: 1 for r in runs if r.id not in cancelled})
    for run_id in cancelled:
        run = app.runs.get(run_id)
        assert run.status is RunStatus.CANCELLED
        assert run.publishes == 0
        assert event_types(app, run_id) == [EventType.TRIGGERED, EventType.CANCELLED]


def test_a_stale_index_entry_loses_its_conditional_write_and_publishes_nothing(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agenda index is eventually consistent: a pass may list a run as it was before
    a change. The conditional write re-checks it, so the change is preserved."""
    runs = due_runs(app, clock, 3)
    listed = {r.id: app.runs.get(r.id) for r in runs}
    cancelled = runs[0].id
    app.runs.cancel(cancelled)
    real_page = app.store.agenda_page
    stale_partition = agenda_pk(app.config.environment, "run", cancelled)

    def stale_page(
        partition: str, until: Any, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        page, cursor = real_page(partition, until, limit, cursor)
        if partition == stale_partition and cancelled not in {r.id for r in page}:
            page = [listed[cancelled], *page]
        return page, cursor

    monkeypatch.setattr(app.store, "agenda_page", stale_page)
    job = app.maintenance.run_pass().jobs[JOB_DUE]
    assert job.conflicts == 1
    assert job.published == 2
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs[1:]})
    run = app.runs.get(cancelled)
    assert run.status is RunStatus.CANCELLED
    assert run.publishes == 0
    assert event_types(app, cancelled) == [EventType.TRIGGERED, EventType.CANCELLED]


def test_a_pass_never_publishes_or_touches_terminal_runs(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    runs = [app.trigger(PLAIN_TASK, {"n": n}) for n in range(3)]
    assert drain(app) == 3
    clock.advance(timedelta(days=1))
    before = {r.id: app.runs.get(r.id) for r in runs}
    report = app.maintenance.run_pass()
    assert all(job.examined == 0 for job in report.jobs.values())
    assert backend.depth(app) == 0
    assert {r.id: app.runs.get(r.id) for r in runs} == before


def test_a_pass_reads_only_due_items_however_large_the_table(
    make_app: Callable[..., Runlane], clock: ManualClock, dynamodb: Any
) -> None:
    """The agenda index, never a table Scan: DynamoDB request and item counts (emulators
    only)."""
    app = register_recovery(make_app(clock=clock))
    app.provision()
    _write_terminal_runs(dynamodb, app, TERMINAL_RUNS)
    runs = due_runs(app, clock, DUE_RUNS)
    app.engine.scheduler.sync()  # the app's schedules (none) stored once, as at a first pass

    requests = count_requests(app.client("dynamodb"))
    sqs_requests = count_requests(app.client("sqs"))
    items_read: list[int] = []

    def count_items(parsed: dict[str, Any], **_: Any) -> None:
        items_read.append(len(parsed.get("Items", [])))

    app.client("dynamodb").meta.events.register("after-call.dynamodb.Query", count_items)
    report = app.maintenance.run_pass()

    assert published(report) == DUE_RUNS
    total = sum(requests.values()) + sum(sqs_requests.values())
    print(
        f"\npass over {TERMINAL_RUNS} terminal + {DUE_RUNS} due runs: "
        f"dynamodb {dict(requests)}, sqs {dict(sqs_requests)}, "
        f"items read {sum(items_read)} in {len(items_read)} queries, total requests {total}"
    )
    assert "Scan" not in requests
    assert sum(items_read) <= 2 * DUE_RUNS
    # one for the cursors, one for when each queue was last drained, one per shard of
    # each agenda kind (run, token, schedule, slot), and one per shard of the status
    # index's parked group
    environment = app.config.environment
    queries = (
        2
        + sum(len(agenda_partitions(environment, kind.value)) for kind in SCANNED_KINDS)
        + len(status_partitions(environment, [RunStatus.PARKED]))
    )
    assert requests["Query"] == queries
    # the app's one queue counted once; drained (no wakeup was published yet), so noted
    assert sqs_requests["GetQueueAttributes"] == 1
    # the queue's drained mark, and the pass's report (for the console and app.health)
    assert requests["PutItem"] == 2
    # the listed runs are read once each, one BatchGetItem per partition that lists any
    assert requests["BatchGetItem"] <= DUE_RUNS
    assert requests["UpdateItem"] == DUE_RUNS
    # the schedules' sync mark and the rate limits last seen: nothing changed in code
    assert requests["GetItem"] == 2
    # and one SendMessageBatch per ten wakeups
    sends = -(-DUE_RUNS // 10)
    assert sqs_requests["SendMessageBatch"] == sends
    assert total <= queries + 2 + 2 + DUE_RUNS + DUE_RUNS + 1 + sends
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs})


def _write_terminal_runs(dynamodb: Any, app: Runlane, count: int) -> None:
    """``count`` succeeded runs, written with BatchWriteItem (no transactions)."""
    now = app.clock.now()
    run, triggered = machine.new_run(
        run_id=uuid.uuid4().hex,
        environment=app.config.environment,
        task=PLAIN_TASK,
        queue=QUEUE,
        payload={"old": True},
        now=now,
    )
    started = machine.claim_lease(
        run, now=now, owner="w", token="t", duration=app.config.lease_duration
    )
    assert isinstance(started, Transition)
    succeeded = machine.record_success(started.after, token="t", result={"ok": 1}, now=now)
    template = succeeded.after
    events = [triggered, *started.events, *succeeded.events]
    assert template.status is RunStatus.SUCCEEDED
    items = [
        run_to_wire(template.with_changes(id=uuid.uuid4().hex), events, '{"old":true}')
        for _ in range(count)
    ]
    assert all("agenda_pk" not in item for item in items)
    for start in range(0, count, 25):
        request = {
            app.config.table: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]
        }
        while request:
            response = dynamodb.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}


def test_the_pass_report_is_json(app: Runlane, clock: ManualClock) -> None:
    app.maintenance.bounds = MaintenanceConfig(limit_per_job=AGENDA_SHARDS)
    due_runs(app, clock, 6)
    report = app.maintenance.run_pass(time_budget_seconds=30)
    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert set(data["jobs"]) == set(JOBS)
    assert {JOB_DUE, JOB_EXPIRED, JOB_DEADLINES, JOB_CANCELLATIONS} <= set(JOBS)
    assert data["jobs"][JOB_DUE]["published"] == published(report) >= 1
    assert set(data["jobs"][JOB_DUE]) == {
        "examined",
        "acted",
        "published",
        "skipped",
        "conflicts",
        "in_line",
        "stranded",
    }
    assert data["jobs"][JOB_DUE]["stranded"] == {}
    assert data["started_at"] == clock.now().isoformat()
    assert data["out_of_time"] is False
    assert isinstance(data["duration_ms"], int)


# concurrent passes ----------------------------------------------------------------------


def test_two_concurrent_passes_over_the_same_due_set(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    """Two processes' passes at the same moment: no error, nothing regresses, every due
    run is published. (Exactly-once is asserted deterministically by the two tests below:
    moto's UpdateItem does not check a condition and apply the update atomically under
    concurrent requests, which DynamoDB does.)"""
    other = another_process(backend, app)
    runs = due_runs(app, clock, 12)
    assert take_wakeups(app) == Counter()
    before = {r.id: app.runs.get(r.id) for r in runs}

    reports = concurrent_passes(app, other)

    wakeups = take_wakeups(app)
    assert set(wakeups) == {r.id for r in runs}, "every due run is published"
    assert sum(published(r) for r in reports) == sum(wakeups.values())
    for run in runs:
        stored = app.runs.get(run.id)
        assert stored.status is RunStatus.QUEUED
        assert stored.seq == before[run.id].seq
        assert stored.publishes >= 1
        assert stored.wake_at is not None and stored.wake_at > clock.now()
        assert event_types(app, run.id) == [EventType.TRIGGERED]
    assert drain(app) == 0  # the wakeups were taken above
    resend(app, *runs)  # as a later pass would: a drain runs each run once
    assert drain(app) == len(runs)
    assert {app.runs.get(r.id).attempt for r in runs} == {1}


def test_a_pass_that_listed_due_runs_another_pass_published_publishes_nothing(
    backend: Backend, app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = another_process(backend, app)
    runs = due_runs(app, clock, 8)
    monkeypatch.setattr(other.store, "agenda_page", listed_before(other, "run"))

    assert published(app.maintenance.run_pass()) == len(runs)
    late = other.maintenance.run_pass().jobs[JOB_DUE]
    assert late.examined == len(runs)
    assert late.conflicts == len(runs)
    assert late.published == 0
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs})
    assert {app.runs.get(r.id).publishes for r in runs} == {1}


def test_a_pass_that_listed_leases_another_pass_recovered_changes_nothing(
    backend: Backend, app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = another_process(backend, app)
    runs = [app.trigger(PLAIN_TASK, {"n": n}) for n in range(6)]
    for n, run in enumerate(runs):
        claim(app, run.id, owner=f"dead-{n}", token=f"tok-dead-{n}")
    clock.advance(app.config.lease_duration)
    monkeypatch.setattr(other.store, "agenda_page", listed_before(other, "run"))

    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].acted == len(runs)
    late = other.maintenance.run_pass().jobs[JOB_EXPIRED]
    assert late.examined == len(runs)
    assert late.conflicts == len(runs)
    assert late.acted == 0
    for run in runs:
        stored = app.runs.get(run.id)
        assert stored.status is RunStatus.QUEUED
        assert stored.lease_losses == 1
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.LEASE_EXPIRED,
        ]
    assert drain(app) == len(runs)
    assert {app.runs.get(r.id).status for r in runs} == {RunStatus.SUCCEEDED}
