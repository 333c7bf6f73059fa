"""Operators read an environment's health (``app.health``) on every backend: runs created
in the last hour by status group and their outcomes per minute, unfinished and parked
runs of any age, the last maintenance pass's stored report, the runs maintenance has to
act on now, and each queue's messages and dead letters. Every read is bounded: the
number of requests does not depend on how many runs are stored, and a status with more
runs than a bounded read takes is counted over a shorter window that the result names."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane_sqs import ManualClock, RunlaneError, RunStatus
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, status_partitions
from runlane_sqs.api import health as health_api
from runlane_sqs.api.app import Runlane
from runlane_sqs.core.health import MINUTE, OUTCOMES, Count
from runlane_sqs.core.indexes import ACTIVE
from runlane_sqs.engine.reports import pass_counts
from runlane_sqs.ports.health import PassRecord
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.operator_support import (
    FAIL,
    OK,
    Tasks,
    make_running,
    one_of_each,
    trigger,
)
from tests.behaviour.worker_support import drain
from tests.emulators import count_requests


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=Tasks().register)


def test_activity_counts_runs_by_status_group_and_outcomes_per_minute(
    app: Runlane, clock: ManualClock
) -> None:
    one_of_each(app, clock)
    clock.advance(90)
    for i in range(3):
        trigger(app, clock, FAIL, f"late-{i}")
    assert drain(app) == 3

    seen = app.health.activity()

    assert seen.complete
    assert seen.counts == {
        ACTIVE: 3,  # released, running, queued (due in an hour)
        "parked": 0,
        "succeeded": 1,
        "failed": 4,
        "cancelled": 1,
    }
    assert seen.unfinished == Count(3) and seen.parked == Count(0)
    assert len(seen.minutes) == 61  # every minute of the hour, oldest first
    assert [m.start for m in seen.minutes] == sorted(m.start for m in seen.minutes)
    busy = [m for m in seen.minutes if m.total]
    assert sum(m.counts["failed"] for m in busy) == 4
    assert sum(m.counts["succeeded"] for m in busy) == 1
    assert busy[-1].counts["failed"] == 3  # the three late failures, a minute or more later
    assert all(set(m.counts) == set(OUTCOMES) for m in seen.minutes)


def test_runs_older_than_the_window_count_only_while_unfinished(
    app: Runlane, clock: ManualClock
) -> None:
    trigger(app, clock, OK, "old")
    trigger(app, clock, OK, "old-and-waiting", delay=6 * 3600)
    assert drain(app) == 1
    clock.advance(2 * 3600)

    seen = app.health.activity()

    assert seen.counts["succeeded"] == 0 and seen.counts[ACTIVE] == 0
    assert seen.unfinished == Count(1)  # any age
    assert sum(m.total for m in seen.minutes) == 0
    shorter = app.health.activity(window=timedelta(hours=3))
    assert shorter.counts["succeeded"] == 1 and shorter.counts[ACTIVE] == 1


@pytest.mark.parametrize("window", [timedelta(seconds=30), timedelta(days=2)])
def test_an_activity_window_out_of_range_is_refused(app: Runlane, window: timedelta) -> None:
    with pytest.raises(RunlaneError, match="1 minute to 1 day"):
        app.health.activity(window=window)


def test_a_bounded_read_names_the_shorter_window_it_covers(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health_api, "TALLIED_PER_PARTITION", 2)
    runs = []
    for i in range(60):  # more than two per partition of "succeeded" (16 of them)
        runs.append(trigger(app, clock, OK, i))
    assert drain(app) == 60

    seen = app.health.activity()

    assert not seen.complete
    assert seen.since < seen.covered_from <= clock.now()
    covered = [r for r in runs if r.created_at >= seen.covered_from]
    assert seen.counts["succeeded"] == len(covered) >= 1
    # minutes before the covered window hold no partial figure
    assert all(m.total == 0 for m in seen.minutes if m.start + MINUTE <= seen.covered_from)
    assert not seen.covered(seen.minutes[0]) and seen.covered(seen.minutes[-1])


def test_the_last_pass_is_stored_and_shown_stale_when_maintenance_stops(
    app: Runlane, clock: ManualClock
) -> None:
    before = app.health.check()
    assert before.last_pass is None and before.stale

    report = app.maintenance.run_pass()
    after = app.health.check()

    assert after.last_pass is not None
    assert after.last_pass.pass_id == report.pass_id
    assert after.last_pass.report["jobs"].keys() == report.to_json()["jobs"].keys()
    assert after.last_pass.counts == pass_counts(report)
    assert not after.stale
    clock.advance(4 * 60)  # more than three maintenance periods of one minute
    assert app.health.check().stale


def test_an_earlier_pass_finishing_late_does_not_replace_a_later_one(app: Runlane) -> None:
    now = app.clock.now()
    store = app.store.health
    store.save_pass(PassRecord("later", now, {}, {"jobs": {}}))
    store.save_pass(PassRecord("earlier", now - timedelta(seconds=5), {}, {"jobs": {}}))

    kept = store.last_pass()
    assert kept is not None and kept.pass_id == "later"


def test_overdue_counts_runs_maintenance_must_act_on(app: Runlane, clock: ManualClock) -> None:
    make_running(app, trigger(app, clock, OK, "held by a worker that dies"))
    trigger(app, clock, OK, "due in an hour", delay=3600)
    assert app.health.check().overdue == Count(0)

    clock.advance(2 * 3600)  # the lease has expired and the queued run is due

    assert app.health.check().overdue == Count(2)
    app.maintenance.run_pass()  # recovers the one, republishes both
    assert app.health.check().overdue == Count(0)


def test_overdue_beyond_the_bound_shows_as_more(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health_api, "OVERDUE_PER_PARTITION", 1)
    for i in range(40):
        trigger(app, clock, OK, i, delay=60)
    clock.advance(3 * 3600)

    overdue = app.health.check().overdue

    assert overdue.more and 1 <= overdue.value <= len(agenda_partitions("x", "run"))
    assert str(overdue).endswith("+")


def test_each_queue_shows_its_messages(app: Runlane, clock: ManualClock) -> None:
    trigger(app, clock, OK, "waiting")

    queues = {q.name: q for q in app.health.check().queues}

    assert queues["default"].problem is None
    assert queues["default"].backlog is not None
    assert queues["default"].backlog.visible == 1


@ONLY_AWS
def test_dead_letters_are_counted_from_the_redrive_target(app: Runlane) -> None:
    queues = {q.name: q for q in app.health.check().queues}
    assert queues["default"].dead_letters == 0


@ONLY_AWS
def test_reads_cost_the_same_with_few_or_many_runs(app: Runlane, clock: ManualClock) -> None:
    counts = count_requests(app.client("dynamodb"))
    app.health.activity()
    app.health.check()
    few = dict(counts)
    for i in range(60):
        trigger(app, clock, OK if i % 2 else FAIL, i)
    assert drain(app) == 60
    counts.clear()

    app.health.activity()
    app.health.check()

    assert dict(counts) == few
    partitions = len(status_partitions("x", RunStatus)) + len(agenda_partitions("x", "run"))
    assert few == {"Query": partitions, "GetItem": 1}
