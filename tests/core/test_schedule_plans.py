"""What maintenance decides for a due schedule (pure): catch-up policies after a 3-day
outage, a simulated year of passes, pause and resume, changed definitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs import Schedule
from runlane_sqs.core.schedule_state import (
    CATCH_UP_PER_PASS,
    LATE_OCCURRENCES,
    ScheduleState,
    ScheduleStatus,
    new_state,
    paused,
    plan_due,
    redefined,
    removed,
    resumed,
)

PERIOD = timedelta(minutes=1)
START = datetime(2028, 1, 1, 0, 5, tzinfo=UTC)
"""Five minutes past midnight: the 00:00 occurrence is no longer on time."""
HOURLY = Schedule.every("hourly", timedelta(hours=1)).for_task("t", "default")
OUTAGE = timedelta(days=3, minutes=10)
"""From 00:05 on 1 January to 00:15 on the 4th: 72 hourly occurrences missed."""


def passes(
    state: ScheduleState, start: datetime, end: datetime, step: timedelta
) -> tuple[list[datetime], ScheduleState]:
    """Every pass from ``start`` to ``end``: the occurrences created, in order."""
    created: list[datetime] = []
    now = start
    while now <= end:
        plan = plan_due(state, now, PERIOD)
        created.extend(plan.occurrences)
        state = plan.after
        now += step
    return created, state


def test_a_new_schedule_starts_after_now_and_nothing_before_counts_as_missed() -> None:
    state = new_state(HOURLY, START, PERIOD)
    assert state.next_at == datetime(2028, 1, 1, 1, tzinfo=UTC)
    assert plan_due(state, START, PERIOD).occurrences == []
    assert state.upcoming(3) == [datetime(2028, 1, 1, h, tzinfo=UTC) for h in (1, 2, 3)]


def test_a_schedule_stored_just_after_an_occurrence_still_creates_it() -> None:
    """A deploy just before 01:00 whose first pass runs just after: on time within
    ``LATE_OCCURRENCES`` maintenance periods, not later."""
    one = datetime(2028, 1, 1, 1, tzinfo=UTC)
    assert new_state(HOURLY, one + PERIOD * LATE_OCCURRENCES, PERIOD).next_at == one
    late = one + PERIOD * LATE_OCCURRENCES + timedelta(milliseconds=1)
    assert new_state(HOURLY, late, PERIOD).next_at == one + timedelta(hours=1)
    once = Schedule.once("launch", at=one).for_task("t", "q")
    stored = new_state(once, one + timedelta(seconds=40), PERIOD)
    assert plan_due(stored, one + timedelta(seconds=40), PERIOD).occurrences == [one]


def test_a_simulated_year_of_passes_creates_every_occurrence_once() -> None:
    """A pass every minute through a leap year, on cron in Paris (DST both ways)."""
    daily = Schedule.cron("daily", "30 2 * * *", tz="Europe/Paris").for_task("t", "default")
    state = new_state(daily, datetime(2027, 12, 31, 12, tzinfo=UTC), PERIOD)
    # passes step by a minute around each occurrence only (the year would be 527k passes)
    created: list[datetime] = []
    end = datetime(2029, 1, 1, tzinfo=UTC)
    while state.next_at is not None and state.next_at < end:
        due = state.next_at
        for now in (due - PERIOD, due + timedelta(seconds=20), due + PERIOD, due + 2 * PERIOD):
            plan = plan_due(state, now, PERIOD)
            created.extend(plan.occurrences)
            assert plan.skipped == 0
            state = plan.after
    assert len(created) == 366  # each day of the leap year (31 December 2027's was before)
    assert len(set(created)) == len(created)
    assert created == sorted(created)
    assert created == list(daily.occurrences(datetime(2027, 12, 31, 12, tzinfo=UTC), end))
    assert state.runs == len(created) and state.last_at == created[-1]


def test_catch_up_latest_creates_only_the_most_recent_missed_occurrence() -> None:
    state = new_state(HOURLY, START, PERIOD)
    plan = plan_due(state, START + OUTAGE, PERIOD)
    assert plan.occurrences == [datetime(2028, 1, 4, 0, tzinfo=UTC)]
    assert plan.skipped == 71  # 72 missed (01:00 on the 1st to 00:00 on the 4th), 1 created
    assert plan.after.next_at == datetime(2028, 1, 4, 1, tzinfo=UTC)
    assert plan.after.last_at == datetime(2028, 1, 4, 0, tzinfo=UTC)
    assert plan_due(plan.after, START + OUTAGE + PERIOD, PERIOD).occurrences == []


def test_catch_up_all_creates_every_missed_occurrence_bounded_per_pass() -> None:
    state = new_state(
        Schedule.every("all", timedelta(hours=1), catch_up="all").for_task("t", "q"), START, PERIOD
    )
    now = START + OUTAGE
    first = plan_due(state, now, PERIOD)
    assert len(first.occurrences) == CATCH_UP_PER_PASS
    assert first.occurrences[0] == datetime(2028, 1, 1, 1, tzinfo=UTC)
    assert first.after.next_at == first.occurrences[-1] + timedelta(hours=1)
    second = plan_due(first.after, now + PERIOD, PERIOD)
    created = first.occurrences + second.occurrences
    assert created == [datetime(2028, 1, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(72)]
    assert plan_due(second.after, now + 2 * PERIOD, PERIOD).occurrences == []


def test_catch_up_skip_creates_none_of_the_missed_occurrences_but_keeps_on_time_ones() -> None:
    skipping = Schedule.every("skip", timedelta(hours=1), catch_up="skip").for_task("t", "q")
    state = new_state(skipping, START, PERIOD)
    late = plan_due(state, START + OUTAGE, PERIOD)
    assert late.occurrences == [] and late.skipped == 72
    assert late.after.next_at == datetime(2028, 1, 4, 1, tzinfo=UTC)
    on_time = plan_due(
        late.after, datetime(2028, 1, 4, 1, tzinfo=UTC) + PERIOD * LATE_OCCURRENCES, PERIOD
    )
    assert on_time.occurrences == [datetime(2028, 1, 4, 1, tzinfo=UTC)]


def test_a_paused_schedule_creates_nothing_and_resumes_by_its_catch_up_policy() -> None:
    state = new_state(HOURLY, START, PERIOD)
    held = paused(state, START)
    assert held.status is ScheduleStatus.PAUSED and held.due_at is None and held.upcoming() == []
    created, held = passes(held, START, START + timedelta(hours=5), timedelta(minutes=30))
    assert created == []
    back = resumed(held, START + OUTAGE)
    assert back.status is ScheduleStatus.ACTIVE and back.version == held.version + 1
    plan = plan_due(back, START + OUTAGE, PERIOD)
    assert plan.occurrences == [datetime(2028, 1, 4, 0, tzinfo=UTC)]


def test_a_changed_definition_takes_effect_from_its_next_occurrence_after_now() -> None:
    state = plan_due(
        new_state(HOURLY, START, PERIOD), datetime(2028, 1, 1, 1, 0, 5, tzinfo=UTC), PERIOD
    ).after
    daily = Schedule.cron("hourly", "0 9 * * *").for_task("t", "default")
    now = datetime(2028, 1, 1, 1, 30, tzinfo=UTC)
    changed = redefined(state, daily, now, PERIOD)
    assert changed.next_at == datetime(2028, 1, 1, 9, tzinfo=UTC)
    assert changed.last_at == state.last_at and changed.runs == state.runs
    assert plan_due(changed, datetime(2028, 1, 1, 8, 59, tzinfo=UTC), PERIOD).occurrences == []


def test_a_removed_schedule_is_off_the_agenda_and_a_finished_once_stays_finished() -> None:
    state = new_state(HOURLY, START, PERIOD)
    gone = removed(state, START)
    assert gone.status is ScheduleStatus.REMOVED and gone.due_at is None
    assert plan_due(gone, START + OUTAGE, PERIOD).occurrences == []
    once = Schedule.once("launch", at=datetime(2028, 1, 1, 9, tzinfo=UTC)).for_task("t", "q")
    plan = plan_due(
        new_state(once, START, PERIOD), datetime(2028, 1, 1, 9, 0, 40, tzinfo=UTC), PERIOD
    )
    assert plan.occurrences == [datetime(2028, 1, 1, 9, tzinfo=UTC)]
    assert plan.after.status is ScheduleStatus.FINISHED and plan.after.due_at is None
    past = new_state(once, datetime(2028, 6, 1, tzinfo=UTC), PERIOD)
    assert past.status is ScheduleStatus.FINISHED and past.next_at is None
