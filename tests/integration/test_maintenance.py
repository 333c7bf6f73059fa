"""Maintenance against DynamoDB and SQS on the moto server, with time moved by hand.

Semantics 4, 9-12: stale wakeups are ignored, a live lease is respected, a passed
deadline is finalized as a timeout rather than reacquired, passes are bounded,
re-entrant and safe to run concurrently, a pass's cost follows the due work rather
than the table, and no run is lost between the DynamoDB write and the SQS publish.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.agenda import AgendaKind
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.errors import ConflictError, LeaseLost
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.recovery import ATTEMPT_TIMEOUT
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.maintenance import (
    JOB_DEADLINES,
    JOB_DUE,
    JOB_EXPIRED,
    MaintenanceConfig,
    PassReport,
)
from tests.integration.apps.recovery_tasks import (
    DEADLINE_TASK,
    DEADLINE_TIMEOUT_SECONDS,
    PLAIN_TASK,
    register_recovery,
)
from tests.integration.conftest import (
    REPO_ROOT,
    count_requests,
    queue_counts,
    queue_url,
    subprocess_env,
)

START = datetime(2030, 1, 1, tzinfo=UTC)
TERMINAL_RUNS = 5_000
DUE_RUNS = 10


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    app = register_recovery(make_app(clock=clock))
    app.provision()
    return app


@pytest.fixture
def url(app: Runlane, sqs: Any) -> str:
    return queue_url(sqs, app)


def take_wakeups(sqs: Any, url: str) -> Counter[str]:
    """Receive and delete every visible wakeup; count them by run id."""
    seen: Counter[str] = Counter()
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        messages = batch.get("Messages", [])
        if not messages:
            return seen
        for message in messages:
            seen[json.loads(message["Body"])["run_id"]] += 1
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
            ],
        )


def drain(app: Runlane) -> int:
    return app.worker().drain()


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def due_runs(app: Runlane, clock: ManualClock, count: int) -> list[Run]:
    """``count`` runs due now whose wakeups only maintenance can publish (delayed past
    SQS's 15 minute limit, then the clock moved to their due time)."""
    runs = [app.trigger(PLAIN_TASK, {"n": n}, delay=timedelta(hours=1)) for n in range(count)]
    clock.advance(timedelta(hours=1))
    return runs


def claim(app: Runlane, run_id: str, *, owner: str, token: str, timeout: Any = None) -> Run:
    """Claim the lease as a worker that then gets stuck (or dies) would."""
    decision = machine.claim_lease(
        app.runs.get(run_id),
        now=app.clock.now(),
        owner=owner,
        token=token,
        duration=app.config.lease_duration,
        timeout=timeout,
    )
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)


def run_ids_by_shard(per_shard: int) -> list[str]:
    """Run ids spread evenly over the agenda shards (``per_shard`` in each)."""
    chosen: dict[int, list[str]] = {s: [] for s in range(keys.AGENDA_SHARDS)}
    while any(len(ids) < per_shard for ids in chosen.values()):
        run_id = uuid.uuid4().hex
        ids = chosen[int(run_id[:4], 16) % keys.AGENDA_SHARDS]
        if len(ids) < per_shard:
            ids.append(run_id)
    return [run_id for ids in chosen.values() for run_id in ids]


def store_due_run(app: Runlane, run_id: str) -> Run:
    """Write a run due now with no wakeup published (as maintenance would find it)."""
    run, event = machine.new_run(
        run_id=run_id,
        environment=app.config.environment,
        task=PLAIN_TASK,
        queue="default",
        payload={"id": run_id},
        now=app.clock.now(),
    )
    app.store.create_run(run, event, json.dumps(run.payload))
    return run


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


# stale and duplicate wakeups ------------------------------------------------------------


def test_a_stale_wakeup_after_success_is_deleted_and_ignored(
    app: Runlane, sqs: Any, url: str
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    message = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]
    stale_body = message["Body"]
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED

    sqs.send_message(QueueUrl=url, MessageBody=stale_body)
    sqs.send_message(QueueUrl=url, MessageBody=stale_body)
    assert drain(app) == 0
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_wakeup_for_a_run_under_a_live_lease_is_not_executed(
    app: Runlane, clock: ManualClock, sqs: Any, url: str
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    held = claim(app, run.id, owner="busy-worker", token="tok-busy")
    assert drain(app) == 0  # the trigger's own wakeup arrives while the lease is held
    clock.advance(app.config.lease_duration / 2)
    sqs.send_message(QueueUrl=url, MessageBody=_wakeup_body(run))
    assert drain(app) == 0
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.RUNNING
    assert stored.lease == held.lease
    assert (stored.attempt, stored.seq) == (1, 2)
    assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.STARTED]
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 0
    assert app.runs.get(run.id) == stored


def _wakeup_body(run: Run) -> str:
    return Wakeup(
        environment=run.environment, run_id=run.id, queue=run.queue, requested_at=START
    ).to_json()


# attempt deadlines ----------------------------------------------------------------------


def test_deadline_and_lease_both_expired_record_a_timeout_not_a_reacquisition(
    app: Runlane, clock: ManualClock, sqs: Any, url: str
) -> None:
    task = app.tasks.resolve(DEADLINE_TASK)
    assert task.timeout == timedelta(seconds=DEADLINE_TIMEOUT_SECONDS)
    run = app.trigger(DEADLINE_TASK, {"n": 1})
    assert take_wakeups(sqs, url) == Counter({run.id: 1})  # the stuck worker got it
    stuck = claim(app, run.id, owner="stuck-worker", token="tok-stuck", timeout=task.timeout)
    assert stuck.deadline_at == START + task.timeout

    clock.advance(app.config.lease_duration + timedelta(seconds=1))
    assert stuck.lease is not None and not stuck.lease.is_live(clock.now())
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DEADLINES].acted == 1
    assert report.jobs[JOB_EXPIRED].acted == 0

    timed_out = app.runs.get(run.id)
    assert timed_out.status is RunStatus.RETRYING
    assert timed_out.attempt == 1
    assert timed_out.lease is None
    assert timed_out.deadline_at is None
    assert timed_out.failure is not None and timed_out.failure.type == ATTEMPT_TIMEOUT
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.ATTEMPT_TIMED_OUT,
    ]

    # the stuck attempt can no longer record anything (fenced on its lease token)
    with pytest.raises(LeaseLost):
        machine.record_success(timed_out, token="tok-stuck", result=1, now=clock.now())
    late = machine.record_success(stuck, token="tok-stuck", result="late", now=clock.now())
    with pytest.raises(ConflictError):
        app.store.apply(late)

    # a second pass finds nothing more to do; the retry (delay 0) then runs as attempt 2
    again = app.maintenance.run_pass()
    assert sum(job.acted for job in again.jobs.values()) == 0
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert (done.status, done.attempt) == (RunStatus.SUCCEEDED, 2)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.ATTEMPT_TIMED_OUT,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


# concurrent and bounded passes ----------------------------------------------------------


def test_two_concurrent_passes_over_the_same_due_set(
    app: Runlane, make_app: Callable[..., Runlane], clock: ManualClock, sqs: Any, url: str
) -> None:
    """Two processes' passes at the same moment: no error, nothing regresses, every due
    run is published. (Exactly-once is asserted deterministically below: moto's
    UpdateItem does not check a condition and apply the update atomically under
    concurrent requests, which DynamoDB does.)"""
    other = register_recovery(make_app(clock=clock))
    runs = due_runs(app, clock, 12)
    assert take_wakeups(sqs, url) == Counter()
    before = {r.id: app.runs.get(r.id) for r in runs}

    reports = concurrent_passes(app, other)

    wakeups = take_wakeups(sqs, url)
    assert set(wakeups) == {r.id for r in runs}, "every due run is published"
    assert sum(r.jobs[JOB_DUE].published for r in reports) == sum(wakeups.values())
    for run in runs:
        stored = app.runs.get(run.id)
        assert stored.status is RunStatus.QUEUED
        assert stored.seq == before[run.id].seq
        assert stored.publishes >= 1
        assert stored.wake_at is not None and stored.wake_at > clock.now()
        assert event_types(app, run.id) == [EventType.TRIGGERED]
    assert drain(app) == 0  # the wakeups were taken above
    for run in runs:  # a later pass publishes each once more; a drain runs each once
        sqs.send_message(QueueUrl=url, MessageBody=_wakeup_body(run))
    assert drain(app) == len(runs)
    assert {app.runs.get(r.id).attempt for r in runs} == {1}


def listed_before(app: Runlane, kind: str) -> Callable[..., tuple[list[Run], None]]:
    """What one pass's scan of ``kind`` sees now, replayed later: a pass that listed its
    candidates just before another pass wrote them."""
    now = app.clock.now()
    real_page = app.store.agenda_page
    pages = {
        partition: real_page(partition, now, 1000, None)[0]
        for partition in keys.agenda_partitions(app.config.environment, kind)
    }

    def replay(partition: str, until: Any, limit: int, cursor: str | None) -> Any:
        if partition in pages:
            return pages.pop(partition), None
        return real_page(partition, until, limit, cursor)

    return replay


def test_a_pass_that_listed_due_runs_another_pass_published_publishes_nothing(
    app: Runlane,
    make_app: Callable[..., Runlane],
    clock: ManualClock,
    sqs: Any,
    url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = register_recovery(make_app(clock=clock))
    runs = due_runs(app, clock, 8)
    monkeypatch.setattr(other.store, "agenda_page", listed_before(other, "due"))

    first = app.maintenance.run_pass()
    assert first.jobs[JOB_DUE].published == len(runs)
    late = other.maintenance.run_pass()
    assert late.jobs[JOB_DUE].examined == len(runs)
    assert late.jobs[JOB_DUE].conflicts == len(runs)
    assert late.jobs[JOB_DUE].published == 0
    assert take_wakeups(sqs, url) == Counter({r.id: 1 for r in runs})
    assert {app.runs.get(r.id).publishes for r in runs} == {1}


def test_a_bounded_scan_needs_three_passes_for_twelve_due_runs(
    app: Runlane, sqs: Any, url: str
) -> None:
    limit = keys.AGENDA_SHARDS  # one candidate per partition per pass
    app.maintenance.config = MaintenanceConfig(limit_per_job=limit)
    runs = [store_due_run(app, run_id) for run_id in run_ids_by_shard(3)]
    assert len(runs) == 12

    wakeups: Counter[str] = Counter()
    for expected in (4, 4, 4):
        report = app.maintenance.run_pass()
        job = report.jobs[JOB_DUE]
        assert job.examined <= limit
        assert job.published == expected
        batch = take_wakeups(sqs, url)
        assert sum(batch.values()) == expected
        assert not set(batch) & set(wakeups), "a run published by an earlier pass"
        wakeups += batch
    assert wakeups == Counter({r.id: 1 for r in runs})

    final = app.maintenance.run_pass()
    assert final.jobs[JOB_DUE].published == 0
    assert take_wakeups(sqs, url) == Counter()


def test_a_pass_reads_only_due_items_however_large_the_table(
    app: Runlane, clock: ManualClock, dynamodb: Any, sqs: Any, url: str
) -> None:
    _write_terminal_runs(dynamodb, app, TERMINAL_RUNS)
    runs = due_runs(app, clock, DUE_RUNS)

    requests = count_requests(app.client("dynamodb"))
    sqs_requests = count_requests(app.client("sqs"))
    items_read: list[int] = []

    def count_items(parsed: dict[str, Any], **_: Any) -> None:
        items_read.append(len(parsed.get("Items", [])))

    app.client("dynamodb").meta.events.register("after-call.dynamodb.Query", count_items)
    report = app.maintenance.run_pass()

    assert report.jobs[JOB_DUE].published == DUE_RUNS
    total = sum(requests.values()) + sum(sqs_requests.values())
    print(
        f"\npass over {TERMINAL_RUNS} terminal + {DUE_RUNS} due runs: "
        f"dynamodb {dict(requests)}, sqs {dict(sqs_requests)}, "
        f"items read {sum(items_read)} in {len(items_read)} queries, total requests {total}"
    )
    assert "Scan" not in requests
    assert sum(items_read) <= 2 * DUE_RUNS
    # one for the cursors, one per shard of each agenda kind (due, lease, token)
    assert requests["Query"] <= 1 + len(AgendaKind) * keys.AGENDA_SHARDS
    assert requests["UpdateItem"] == DUE_RUNS
    assert total <= 10 + 3 * DUE_RUNS
    assert take_wakeups(sqs, url) == Counter({r.id: 1 for r in runs})


def _write_terminal_runs(dynamodb: Any, app: Runlane, count: int) -> None:
    """``count`` succeeded runs, written with BatchWriteItem (no transactions)."""
    now = app.clock.now()
    run, triggered = machine.new_run(
        run_id=uuid.uuid4().hex,
        environment=app.config.environment,
        task=PLAIN_TASK,
        queue="default",
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


# no run is lost between DynamoDB and SQS -------------------------------------------------


class RefusedSends:
    """Makes every SQS SendMessage of one client fail as if SQS were unreachable."""

    EVENT = "before-call.sqs.SendMessage"

    def __init__(self, client: Any) -> None:
        self.client = client
        self.count = 0
        client.meta.events.register(self.EVENT, self.refuse)

    def refuse(self, **_: Any) -> None:
        self.count += 1
        raise EndpointConnectionError(endpoint_url=self.client.meta.endpoint_url)

    def stop(self) -> None:
        self.client.meta.events.unregister(self.EVENT, self.refuse)


@pytest.fixture
def refused_sends(app: Runlane) -> Iterator[RefusedSends]:
    refused = RefusedSends(app.client("sqs"))
    yield refused
    refused.stop()


def test_a_failed_eager_publish_leaves_the_run_queued_for_maintenance(
    app: Runlane, sqs: Any, url: str, refused_sends: RefusedSends
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    assert run.created
    assert refused_sends.count == 1
    refused_sends.stop()

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert drain(app) == 0

    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_process_killed_between_write_and_publish_loses_no_run(
    make_app: Callable[..., Runlane], backend_env: dict[str, str], sqs: Any
) -> None:
    provisioner = register_recovery(make_app())
    provisioner.provision()
    url = queue_url(sqs, provisioner)
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.integration.apps.crash_before_publish"],
        cwd=REPO_ROOT,
        env=subprocess_env(backend_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == 1, crashed.stderr[-3000:]
    run_id = crashed.stdout.strip()
    assert len(run_id) == 32, crashed.stdout

    clock = ManualClock(datetime.now(UTC))
    app = register_recovery(make_app(clock=clock))
    stored = app.runs.get(run_id)
    assert stored.status is RunStatus.QUEUED
    assert stored.wake_at is not None, "the eager publish was due: listed after the delay"
    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}

    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 0
    clock.set(max(clock.now(), stored.wake_at))
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].published == 1
    assert drain(app) == 1
    assert app.runs.get(run_id).status is RunStatus.SUCCEEDED
    assert event_types(app, run_id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_a_pass_that_listed_leases_another_pass_recovered_changes_nothing(
    app: Runlane,
    make_app: Callable[..., Runlane],
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = register_recovery(make_app(clock=clock))
    runs = [app.trigger(PLAIN_TASK, {"n": n}) for n in range(6)]
    for n, run in enumerate(runs):
        claim(app, run.id, owner=f"dead-{n}", token=f"tok-dead-{n}")
    clock.advance(app.config.lease_duration)
    monkeypatch.setattr(other.store, "agenda_page", listed_before(other, "lease"))

    first = app.maintenance.run_pass()
    assert first.jobs[JOB_EXPIRED].acted == len(runs)
    late = other.maintenance.run_pass()
    assert late.jobs[JOB_EXPIRED].examined == len(runs)
    assert late.jobs[JOB_EXPIRED].conflicts == len(runs)
    assert late.jobs[JOB_EXPIRED].acted == 0
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
