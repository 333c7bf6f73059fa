"""What maintenance repairs, on every backend with time moved by hand.

Due work reaches the queue through maintenance, at its due time and not before: a delay
of hours (past SQS's 15-minute limit), a wakeup that was lost (published again only after
a delay that doubles each time, with no event), an eager publish that failed, even when
the process died between the storage write and the publish. A wakeup is only a hint:
duplicate, stale and early ones, and ones for a run another worker holds, execute
nothing and are deleted. Recovery repairs the same run: an expired lease makes it
runnable again, an attempt past its deadline is recorded as timed out rather than
reacquired, and an abandoned cancellation is finalized; cancelling a run that is not
running takes effect at once.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from runlane_sqs import EventType, IllegalTransition, Runlane, RunStatus
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core import machine
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.errors import ConflictError, LeaseLost
from runlane_sqs.core.recovery import ATTEMPT_TIMEOUT
from runlane_sqs.core.wakeup import Wakeup, parse_wakeup
from runlane_sqs.engine.reports import JOB_CANCELLATIONS, JOB_DEADLINES, JOB_DUE, JOB_EXPIRED
from tests.apps.recovery_tasks import (
    DEADLINE_TASK,
    DEADLINE_TIMEOUT_SECONDS,
    PLAIN_TASK,
    register_recovery,
)
from tests.backends import Backend
from tests.behaviour.maintenance_support import (
    QUEUE,
    claim,
    due_runs,
    published,
    resend,
    take_wakeups,
)
from tests.behaviour.worker_support import drain, event_types
from tests.emulators import REPO_ROOT, queue_counts, queue_url, subprocess_env


@pytest.fixture
def app(backend: Backend) -> Runlane:
    """An app on the test's backend with the tasks of the recovery worker apps."""
    return backend.app(register=register_recovery)


@contextmanager
def sqs_unreachable(app: Runlane) -> Iterator[list[str]]:
    """Every publish of ``app`` fails while inside, as in an SQS outage; yields the refused
    requests. On the emulators each send request raises a connection error before it
    leaves; in memory the transport reports every wakeup unsent."""
    refused: list[str] = []
    transport = app.transport
    if isinstance(transport, InMemoryTransport):

        def refuse_publish(
            wakeups: Sequence[Wakeup], delay: timedelta | None = None
        ) -> list[Wakeup]:
            refused.append("publish")
            return list(wakeups)

        transport.publish = refuse_publish  # type: ignore[method-assign]
        try:
            yield refused
        finally:
            del transport.publish
        return
    client = app.client("sqs")
    events = ("before-call.sqs.SendMessage", "before-call.sqs.SendMessageBatch")

    def refuse_request(model: Any, **_: Any) -> None:
        refused.append(model.name)
        raise EndpointConnectionError(endpoint_url=client.meta.endpoint_url)

    for event in events:
        client.meta.events.register(event, refuse_request)
    try:
        yield refused
    finally:
        for event in events:
            client.meta.events.unregister(event, refuse_request)


SUCCEEDED_ONCE = [EventType.TRIGGERED, EventType.STARTED, EventType.SUCCEEDED]


# delays ---------------------------------------------------------------------------------


def test_a_three_hour_delay_is_not_run_early(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1}, delay=timedelta(hours=3))
    assert run.status is RunStatus.QUEUED
    assert backend.depth(app) == 0
    assert drain(app) == 0

    clock.advance(timedelta(hours=3) - timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert published(report) == 0
    assert report.jobs[JOB_DUE].examined == 0
    assert backend.depth(app) == 0
    assert drain(app) == 0
    assert event_types(app, run.id) == [EventType.TRIGGERED]

    clock.advance(timedelta(seconds=1))
    assert published(app.maintenance.run_pass()) == 1
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.SUCCEEDED
    assert stored.result == {"attempt": 1, "payload": {"n": 1}}
    assert event_types(app, run.id) == SUCCEEDED_ONCE


def test_a_short_delay_is_published_at_once_and_not_again_by_maintenance(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    """SQS holds the delayed message for ten real minutes, which the manual clock cannot
    shorten: on the emulators the scenario stops before the delivery."""
    run = app.trigger(PLAIN_TASK, None, delay=timedelta(minutes=10))
    assert backend.depth(app) == 1
    assert drain(app) == 0, "not visible before its delay"
    clock.advance(timedelta(minutes=10))
    assert published(app.maintenance.run_pass()) == 0
    assert backend.depth(app) == 1
    if backend.real:
        return
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


# republishing and duplicate or stale wakeups --------------------------------------------


def test_a_due_run_is_republished_only_after_the_republish_delay(
    app: Runlane, clock: ManualClock
) -> None:
    after = app.config.republish.after
    assert after == timedelta(minutes=5)
    run = app.trigger(PLAIN_TASK, None)
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

    assert app.runs.get(run.id).seq == 1, "publishing appends no event"
    assert event_types(app, run.id) == [EventType.TRIGGERED]


def test_duplicate_wakeups_from_republishing_run_the_run_once(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    """The first wakeup was deleted unhandled (lost), so maintenance republishes the run;
    then a copy of the first arrives after all (SQS delivers at least once)."""
    run = app.trigger(PLAIN_TASK, None)
    [taken] = app.transport.receive(QUEUE, 10, 0)
    app.transport.ack([taken])
    clock.advance(app.config.republish.after)
    assert published(app.maintenance.run_pass()) == 1
    assert app.transport.publish([parse_wakeup(taken.body)]) == []
    assert backend.depth(app) == 2
    assert drain(app) == 1
    assert backend.depth(app) == 0
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert event_types(app, run.id) == SUCCEEDED_ONCE


def test_a_stale_wakeup_after_success_is_deleted_and_ignored(
    backend: Backend, app: Runlane
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    [message] = app.transport.receive(QUEUE, 10, 1)
    app.transport.release([message])
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED

    stale = parse_wakeup(message.body)
    assert app.transport.publish([stale, stale]) == []
    assert backend.depth(app) == 2
    assert drain(app) == 0
    assert backend.depth(app) == 0
    assert event_types(app, run.id) == SUCCEEDED_ONCE


def test_a_wakeup_for_a_run_under_a_live_lease_is_not_executed(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    held = claim(app, run.id, owner="busy-worker", token="tok-busy")
    assert drain(app) == 0  # the trigger's own wakeup arrives while the lease is held
    clock.advance(app.config.lease_duration / 2)
    resend(app, run)
    assert drain(app) == 0
    assert backend.depth(app) == 0

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.RUNNING
    assert stored.lease == held.lease
    assert (stored.attempt, stored.seq) == (1, 2)
    assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.STARTED]
    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].acted == 0
    assert app.runs.get(run.id) == stored


# no run is lost between storage and the queue --------------------------------------------


def test_a_failed_eager_publish_leaves_the_run_queued_for_the_next_pass(
    backend: Backend, app: Runlane
) -> None:
    with sqs_unreachable(app) as refused:
        run = app.trigger(PLAIN_TASK, {"n": 1})
    assert run.created
    assert len(refused) == 1

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED
    assert stored.wake_at is None, "listed as due now, not after the republish delay"
    assert backend.depth(app) == 0
    assert drain(app) == 0

    assert published(app.maintenance.run_pass()) == 1
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert event_types(app, run.id) == SUCCEEDED_ONCE


def test_a_failed_publish_of_trigger_many_is_repaired(backend: Backend, app: Runlane) -> None:
    with sqs_unreachable(app) as refused:
        runs = app.trigger_many(PLAIN_TASK, [{"n": n} for n in range(5)])
    assert len(refused) == 1
    assert backend.depth(app) == 0
    assert published(app.maintenance.run_pass()) == 5
    assert drain(app) == 5
    assert {app.runs.get(r.id).status for r in runs} == {RunStatus.SUCCEEDED}


def test_a_failed_maintenance_publish_is_retried_by_a_later_pass(
    app: Runlane, clock: ManualClock
) -> None:
    runs = due_runs(app, clock, 2)
    with sqs_unreachable(app) as refused:
        report = app.maintenance.run_pass()
    assert refused
    assert report.jobs[JOB_DUE].acted == 2
    assert published(report) == 0
    assert published(app.maintenance.run_pass()) == 2
    assert take_wakeups(app) == Counter({r.id: 1 for r in runs})


def test_a_process_killed_between_write_and_publish_loses_no_run(
    make_app: Callable[..., Runlane], backend_env: dict[str, str], sqs: Any
) -> None:
    """A real process dies right after the write (emulators only: the in-memory store
    does not outlive its process)."""
    provisioner = register_recovery(make_app())
    provisioner.provision()
    url = queue_url(sqs, provisioner)
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.apps.crash_before_publish"],
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

    assert published(app.maintenance.run_pass()) == 0
    clock.set(max(clock.now(), stored.wake_at))
    assert published(app.maintenance.run_pass()) == 1
    assert drain(app) == 1
    assert app.runs.get(run_id).status is RunStatus.SUCCEEDED
    assert event_types(app, run_id) == SUCCEEDED_ONCE


# recovery of the same run ---------------------------------------------------------------


def test_an_expired_lease_is_recovered_and_the_same_run_completes(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, None)
    assert take_wakeups(app) == Counter({run.id: 1})  # the worker that then dies got it
    claim(app, run.id, owner="dead-worker", token="tok-dead")
    clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 1
    assert report.jobs[JOB_EXPIRED].published == 1
    assert report.jobs[JOB_DEADLINES].acted == 0
    assert drain(app) == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.SUCCEEDED, 2)
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]


def test_deadline_and_lease_both_expired_record_a_timeout_not_a_reacquisition(
    app: Runlane, clock: ManualClock
) -> None:
    task = app.tasks.resolve(DEADLINE_TASK)
    assert task.timeout == timedelta(seconds=DEADLINE_TIMEOUT_SECONDS)
    run = app.trigger(DEADLINE_TASK, {"n": 1})
    assert take_wakeups(app) == Counter({run.id: 1})  # the stuck worker got it
    started_at = clock.now()
    stuck = claim(app, run.id, owner="stuck-worker", token="tok-stuck", timeout=task.timeout)
    assert stuck.deadline_at == started_at + task.timeout

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


# cancellation ---------------------------------------------------------------------------


def test_cancel_of_a_queued_run_is_immediate_and_its_wakeup_is_ignored(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, None)
    assert backend.depth(app) == 1
    cancelled = app.runs.cancel(run.id, reason="typo", actor="alice")
    assert cancelled.status is RunStatus.CANCELLED
    events = app.runs.events(run.id)
    assert events[-1].type is EventType.CANCELLED
    assert events[-1].data == {"actor": "alice", "reason": "typo"}

    assert drain(app) == 0
    assert backend.depth(app) == 0
    clock.advance(timedelta(hours=2))
    assert published(app.maintenance.run_pass()) == 0
    assert app.runs.get(run.id).status is RunStatus.CANCELLED
    assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.CANCELLED]


def test_cancel_of_a_delayed_run_keeps_maintenance_from_publishing_it(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, None, delay=timedelta(hours=2))
    app.runs.cancel(run.id)
    clock.advance(timedelta(hours=3))
    assert published(app.maintenance.run_pass()) == 0
    assert backend.depth(app) == 0
    assert drain(app) == 0
    assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.CANCELLED]


@pytest.mark.parametrize("outcome", ["succeeded", "cancelled"])
def test_cancel_of_a_finished_run_raises(app: Runlane, outcome: str) -> None:
    run = app.trigger(PLAIN_TASK, None)
    if outcome == "succeeded":
        assert drain(app) == 1
    else:
        app.runs.cancel(run.id)
    before = app.runs.get(run.id)
    assert before.status is RunStatus(outcome)
    with pytest.raises(IllegalTransition):
        app.runs.cancel(run.id)
    assert app.runs.get(run.id) == before


def test_an_abandoned_cancel_request_is_finalized_after_lease_expiry(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, None)
    claim(app, run.id, owner="dead-worker", token="tok-dead")
    requested = app.runs.cancel(run.id, reason="stop")
    assert requested.status is RunStatus.CANCEL_REQUESTED

    assert app.maintenance.run_pass().jobs[JOB_CANCELLATIONS].acted == 0
    clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_CANCELLATIONS].acted == 1
    assert report.jobs[JOB_EXPIRED].acted == 0
    assert app.runs.get(run.id).status is RunStatus.CANCELLED
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.CANCEL_REQUESTED,
        EventType.CANCELLED,
    ]
    assert drain(app) == 0
