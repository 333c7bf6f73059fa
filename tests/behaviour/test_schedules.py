"""Schedules on every backend, with time moved by hand: maintenance turns due
occurrences into ordinary runs, each exactly once however many passes run; the run
records its occurrence; state is stored, so a new deploy (a new app) goes on where the
last stopped, a removed schedule stops and a changed one takes effect from its next
occurrence; operators pause, resume and trigger."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from runlane_sqs import (
    EventType,
    IllegalTransition,
    Runlane,
    RunlaneError,
    RunStatus,
    Schedule,
    ScheduleNotFound,
    ScheduleStatus,
)
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.schedules import occurrence_run_id
from runlane_sqs.engine.reports import JOB_SCHEDULES
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import drain, second_app

PARIS = "Europe/Paris"
TASK = "digests.send"
OTHER_TASK = "reports.build"
T0 = datetime(2028, 3, 25, 23, 5, tzinfo=UTC)
"""Five minutes past 23:00 UTC (that occurrence is not on time any more), the evening
before Paris springs forward."""
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def _send(ctx: Any, payload: Any) -> Any:
    at = ctx.scheduled_for.isoformat() if ctx.scheduled_for else None
    return {"payload": payload, "schedule": ctx.schedule_id, "occurrence": at}


def register(schedules: list[Schedule], task: str = TASK) -> Any:
    def add(app: Runlane) -> None:
        app.task(_send, name=task, schedules=schedules)

    return add


HOURLY = Schedule.every("digests.hourly", HOUR, payload={"kind": "hourly"})
DAILY = Schedule.cron("digests.daily", "30 2 * * *", tz="Europe/Paris", payload={"kind": "daily"})


def scheduled(app: Runlane, schedule_id: str) -> list[datetime]:
    """The occurrences of the runs a schedule made, oldest first (each listed once)."""
    runs = []
    cursor: str | None = None
    while True:
        page = app.runs.list(schedule=schedule_id, limit=100, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.cursor
        if cursor is None:
            break
    return sorted(r.scheduled_for for r in runs if r.scheduled_for is not None)


def test_due_occurrences_become_runs_that_record_them(backend: Backend, clock: ManualClock) -> None:
    app = backend.app(register=register([HOURLY, DAILY]))
    first = app.maintenance.run_pass()
    assert first.jobs[JOB_SCHEDULES].acted == 0  # stored, nothing due yet
    assert [s.id for s in app.schedules.list()] == ["digests.daily", "digests.hourly"]
    clock.advance(HOUR)  # 00:00:30 UTC: the hourly one is due
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_SCHEDULES].acted == 1 and report.jobs[JOB_SCHEDULES].published == 1
    occurrence = datetime(2028, 3, 26, 0, 0, tzinfo=UTC)
    run = app.runs.get(occurrence_run_id(app.config.environment, "digests.hourly", occurrence))
    assert (run.schedule_id, run.scheduled_for, run.task, run.payload) == (
        "digests.hourly",
        occurrence,
        TASK,
        {"kind": "hourly"},
    )
    triggered = app.runs.events(run.id)[0]
    assert triggered.type is EventType.TRIGGERED
    assert triggered.data["schedule"] == "digests.hourly"
    assert triggered.data["occurrence"] == occurrence.isoformat()
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {  # the handler sees its occurrence
        "payload": {"kind": "hourly"},
        "schedule": "digests.hourly",
        "occurrence": occurrence.isoformat(),
    }
    # 01:00 UTC is 03:00 in Paris on the day 02:30 does not exist: the daily one fires
    clock.advance(HOUR)
    app.maintenance.run_pass()
    assert scheduled(app, "digests.daily") == [datetime(2028, 3, 26, 1, 0, tzinfo=UTC)]
    assert scheduled(app, "digests.hourly") == [occurrence, occurrence + HOUR]


def test_two_passes_at_the_same_moment_create_each_occurrence_once(
    backend: Backend, clock: ManualClock
) -> None:
    """Both passes read the schedule due before either writes, at the same moment: one
    run per occurrence, and the loser counts its lost writes as conflicts."""
    catching_up = Schedule.every("every.hour", HOUR, catch_up="all")
    app = backend.app(register=register([catching_up]))
    app.maintenance.run_pass()
    clock.advance(timedelta(hours=5))
    state = app.schedules.get("every.hour")
    made = [app.engine.scheduler.materialize(state, clock.now(), name) for name in ("a", "b")]
    assert [len(m.runs) for m in made] == [5, 0]
    assert (made[1].existing, made[0].moved_on, made[1].moved_on) == (5, True, False)
    report = app.maintenance.run_pass()  # finds nothing left to do
    assert report.jobs[JOB_SCHEDULES].acted == 0
    assert scheduled(app, "every.hour") == [T0.replace(minute=0) + HOUR * h for h in range(1, 6)]


def test_a_pass_that_stopped_between_the_run_and_the_state_is_finished_by_the_next(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY]))
    app.maintenance.run_pass()
    clock.advance(HOUR)
    state = app.schedules.get("digests.hourly")
    occurrence = state.next_at
    assert occurrence is not None
    scheduler = app.engine.scheduler
    scheduler._occurrence_run(state.schedule, occurrence, clock.now(), "a")  # no state write
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_SCHEDULES].acted == 0 and report.jobs[JOB_SCHEDULES].conflicts == 1
    assert app.schedules.get("digests.hourly").last_at == occurrence
    assert scheduled(app, "digests.hourly") == [occurrence]


def test_catch_up_latest_after_three_days_down_creates_one_run(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY]))
    app.maintenance.run_pass()
    clock.advance(timedelta(days=3, minutes=10))
    report = app.maintenance.run_pass()
    job = report.jobs[JOB_SCHEDULES]
    assert (job.acted, job.skipped) == (1, 71)
    assert scheduled(app, "digests.hourly") == [datetime(2028, 3, 28, 23, 0, tzinfo=UTC)]


def test_a_new_deploy_goes_on_where_the_last_stopped(backend: Backend, clock: ManualClock) -> None:
    app = backend.app(register=register([HOURLY]))
    app.maintenance.run_pass()
    clock.advance(HOUR)
    app.maintenance.run_pass()
    deployed = second_app(backend, app, register([HOURLY]))
    clock.advance(HOUR)
    deployed.maintenance.run_pass()
    assert deployed.schedules.get("digests.hourly").runs == 2
    assert len(scheduled(deployed, "digests.hourly")) == 2


def test_code_that_removes_a_schedule_stops_it_and_a_change_takes_effect_next(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY, DAILY]))
    app.maintenance.run_pass()
    clock.advance(HOUR)
    app.maintenance.run_pass()
    twice_a_day = Schedule.cron("digests.daily", "0 6,18 * * *", tz="UTC")
    deployed = second_app(backend, app, register([twice_a_day]))
    clock.advance(MINUTE)  # 00:01:30
    deployed.maintenance.run_pass()
    assert deployed.schedules.get("digests.hourly").status is ScheduleStatus.REMOVED
    changed = deployed.schedules.get("digests.daily")
    assert changed.next_at == datetime(2028, 3, 26, 6, tzinfo=UTC)
    assert changed.schedule.expression == "0 6,18 * * *"
    clock.advance(timedelta(hours=6))
    deployed.maintenance.run_pass()
    assert scheduled(deployed, "digests.hourly") == [datetime(2028, 3, 26, 0, tzinfo=UTC)]
    assert scheduled(deployed, "digests.daily") == [datetime(2028, 3, 26, 6, tzinfo=UTC)]


def test_schedules_of_tasks_an_app_does_not_register_are_left_alone(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY]))
    app.maintenance.run_pass()
    other = second_app(backend, app, register([], task=OTHER_TASK))
    clock.advance(HOUR)
    report = other.maintenance.run_pass()
    assert report.jobs[JOB_SCHEDULES].skipped == 1 and report.jobs[JOB_SCHEDULES].acted == 0
    assert other.schedules.get("digests.hourly").status is ScheduleStatus.ACTIVE
    app.maintenance.run_pass()
    assert len(scheduled(app, "digests.hourly")) == 1


def test_pause_is_durable_and_resume_follows_the_catch_up_policy(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY]))
    app.maintenance.run_pass()
    held = app.schedules.pause("digests.hourly")
    assert held.status is ScheduleStatus.PAUSED and held.upcoming() == []
    assert app.schedules.pause("digests.hourly").version == held.version  # a no-op
    deployed = second_app(backend, app, register([HOURLY]))
    for _ in range(5):
        clock.advance(HOUR)
        deployed.maintenance.run_pass()
    assert scheduled(app, "digests.hourly") == []
    back = deployed.schedules.resume("digests.hourly")
    assert back.status is ScheduleStatus.ACTIVE
    deployed.maintenance.run_pass()
    assert scheduled(app, "digests.hourly") == [datetime(2028, 3, 26, 4, tzinfo=UTC)]


def test_a_finished_schedule_neither_pauses_nor_resumes(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([Schedule.once("digests.once", T0 + MINUTE)]))
    app.maintenance.run_pass()
    clock.advance(2 * MINUTE)
    app.maintenance.run_pass()  # its one occurrence made: nothing is left
    assert app.schedules.get("digests.once").status is ScheduleStatus.FINISHED
    for change in (app.schedules.pause, app.schedules.resume):
        with pytest.raises(IllegalTransition, match="is finished"):
            change("digests.once")
    assert app.schedules.get("digests.once").status is ScheduleStatus.FINISHED


def test_trigger_now_makes_an_extra_linked_run_without_moving_the_cadence(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([DAILY]))
    app.maintenance.run_pass()
    before = app.schedules.get("digests.daily")
    run = app.schedules.trigger_now("digests.daily")
    assert (run.schedule_id, run.scheduled_for, run.payload) == (
        "digests.daily",
        None,
        {"kind": "daily"},
    )
    assert app.runs.events(run.id)[0].data["schedule"] == "digests.daily"
    after = app.schedules.get("digests.daily")
    assert (after.next_at, after.version) == (before.next_at, before.version)
    assert drain(app) == 1
    assert [r.id for r in app.runs.list(schedule="digests.daily").runs] == [run.id]


def test_operators_get_clear_errors_for_unknown_and_malformed_ids(
    backend: Backend, clock: ManualClock
) -> None:
    app = backend.app(register=register([HOURLY]))
    with pytest.raises(ScheduleNotFound, match="'nope' not found"):
        app.schedules.get("nope")
    for hostile in ("a#b", "<b>x</b>", "\x1b[31m", "a\udcff", ""):
        with pytest.raises(RunlaneError) as refused:
            app.schedules.pause(hostile)
        assert str(refused.value).isprintable()
    # an id the app defines is stored on first use, before maintenance ran
    assert app.schedules.get("digests.hourly").next_at == datetime(2028, 3, 26, 0, tzinfo=UTC)
    with pytest.raises(RunlaneError):
        app.runs.list(schedule="a#b")
    assert Counter(s.status for s in app.schedules.list()) == {ScheduleStatus.ACTIVE: 1}


@ONLY_MEMORY
def test_passes_across_both_daylight_saving_changes_create_one_run_a_day(
    backend: Backend, clock: ManualClock
) -> None:
    """Maintenance every 15 minutes (time moved by hand) through the weekends Paris
    springs forward and falls back: a daily 02:30 in Paris, one run a day, at 03:00 on
    the day 02:30 does not exist and at the first 02:30 on the day it comes twice. The
    months between are one gap: catch-up ``latest`` makes one run for it. (Memory only:
    about 600 passes.)"""
    app = backend.app(register=register([Schedule.cron("paris.night", "30 2 * * *", tz=PARIS)]))
    for start in (datetime(2028, 3, 25, tzinfo=UTC), datetime(2028, 10, 28, tzinfo=UTC)):
        clock.set(start)
        for _ in range(3 * 24 * 4):  # three days
            app.maintenance.run_pass()
            clock.advance(timedelta(minutes=15))
    local = [t.astimezone(ZoneInfo(PARIS)) for t in scheduled(app, "paris.night")]
    assert [(t.month, t.day, t.hour, t.minute) for t in local] == [
        (3, 25, 2, 30),
        (3, 26, 3, 0),  # 02:30 does not exist that day
        (3, 27, 2, 30),
        (10, 27, 2, 30),  # the latest of the occurrences missed from March to October
        (10, 28, 2, 30),
        (10, 29, 2, 30),  # 02:30 comes twice that day: once, summer time
        (10, 30, 2, 30),
    ]
    assert local[5].utcoffset() == timedelta(hours=2)
