"""Schedule definitions: what registration refuses (before anything is written), and the
occurrences a definition gives, over a simulated year with daylight-saving changes
both ways, month ends and a leap day."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from runlane_sqs import CatchUp, ConfigurationError, Schedule
from runlane_sqs.core.schedules import ScheduleKind, occurrence_run_id
from runlane_sqs.errors import InvalidPayloadError, PayloadTooLarge
from runlane_sqs.testing import in_memory_app

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
LEAP_YEAR = 2028
"""Paris springs forward on 26 March 2028 (02:00 -> 03:00) and falls back on 29 October
(03:00 -> 02:00); New York on 12 March (02:00 -> 03:00) and 5 November (02:00 -> 01:00)."""


def year_of(schedule: Schedule, year: int = LEAP_YEAR) -> list[datetime]:
    start = datetime(year, 1, 1, tzinfo=UTC) - timedelta(days=1)
    end = datetime(year + 1, 1, 1, tzinfo=UTC) + timedelta(days=1)
    return list(schedule.occurrences(start, end))


def local_days(occurrences: list[datetime], zone: ZoneInfo, year: int = LEAP_YEAR) -> Counter[date]:
    return Counter(
        o.astimezone(zone).date() for o in occurrences if o.astimezone(zone).year == year
    )


# --- occurrences ------------------------------------------------------------------


def test_a_daily_time_the_zone_skips_fires_once_that_day_at_the_first_valid_time() -> None:
    daily = Schedule.cron("daily", "30 2 * * *", tz="Europe/Paris")
    occurrences = year_of(daily)
    days = local_days(occurrences, PARIS)
    assert len(days) == 366 and set(days.values()) == {1}  # every day of the leap year once
    spring = [
        o.astimezone(PARIS) for o in occurrences if o.astimezone(PARIS).date() == date(2028, 3, 26)
    ]
    assert [(o.hour, o.minute) for o in spring] == [(3, 0)]
    others = [
        o.astimezone(PARIS) for o in occurrences if o.astimezone(PARIS).date() != date(2028, 3, 26)
    ]
    assert {(o.hour, o.minute) for o in others} == {(2, 30)}


def test_a_daily_time_the_zone_repeats_fires_once_at_its_first_instance() -> None:
    daily = Schedule.cron("night", "30 1 * * *", tz="America/New_York")
    occurrences = year_of(daily)
    days = local_days(occurrences, NEW_YORK)
    assert len(days) == 366 and set(days.values()) == {1}
    fall_back = [o for o in occurrences if o.astimezone(NEW_YORK).date() == date(2028, 11, 5)]
    assert fall_back == [datetime(2028, 11, 5, 5, 30, tzinfo=UTC)]  # 01:30 EDT, not EST
    # Paris repeats 02:30 on 29 October: once, too
    paris = year_of(Schedule.cron("paris", "30 2 * * *", tz="Europe/Paris"))
    assert [o for o in paris if o.astimezone(PARIS).date() == date(2028, 10, 29)] == [
        datetime(2028, 10, 29, 0, 30, tzinfo=UTC)
    ]


def test_month_ends_and_the_leap_day() -> None:
    thirty_first = year_of(Schedule.cron("m31", "0 12 31 * *", tz="Europe/Paris"))
    assert [o.astimezone(PARIS).month for o in thirty_first if o.year == LEAP_YEAR] == [
        1,
        3,
        5,
        7,
        8,
        10,
        12,
    ]
    leap = Schedule.cron("leap", "0 9 29 2 *", tz="UTC")
    assert [o for o in year_of(leap)] == [datetime(2028, 2, 29, 9, tzinfo=UTC)]
    assert year_of(leap, 2027) == []
    last_day = year_of(Schedule.cron("last", "0 18 L * *", tz="America/New_York"))
    assert [o.astimezone(NEW_YORK).day for o in last_day if o.year == LEAP_YEAR][:3] == [31, 29, 31]


def test_an_interval_keeps_its_grid_in_utc_across_daylight_saving_changes() -> None:
    hourly = Schedule.every("hourly", timedelta(hours=1))
    occurrences = year_of(hourly)
    assert len([o for o in occurrences if o.year == LEAP_YEAR]) == 366 * 24
    assert all(o.minute == 0 and o.second == 0 for o in occurrences)
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(occurrences))
    anchored = Schedule.every(
        "anchored", timedelta(minutes=90), start_at=datetime(2028, 1, 1, 0, 20, tzinfo=UTC)
    )
    assert list(
        anchored.occurrences(datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, 3, tzinfo=UTC))
    ) == [
        datetime(2028, 1, 1, 0, 20, tzinfo=UTC),
        datetime(2028, 1, 1, 1, 50, tzinfo=UTC),
    ]


def test_start_and_end_bound_the_occurrences() -> None:
    bounded = Schedule.cron(
        "bounded",
        "0 9 * * *",
        start_at=datetime(2028, 3, 1, tzinfo=UTC),
        end_at=datetime(2028, 3, 3, 9, tzinfo=UTC),
    )
    assert year_of(bounded) == [datetime(2028, 3, d, 9, tzinfo=UTC) for d in (1, 2, 3)]
    assert bounded.latest_until(datetime(2029, 1, 1, tzinfo=UTC)) == datetime(
        2028, 3, 3, 9, tzinfo=UTC
    )
    assert bounded.latest_until(datetime(2028, 2, 1, tzinfo=UTC)) is None
    once = Schedule.once("launch", at=datetime(2028, 1, 1, 9, tzinfo=PARIS))
    assert year_of(once) == [datetime(2028, 1, 1, 8, tzinfo=UTC)]
    assert once.next_after(datetime(2028, 1, 1, 8, tzinfo=UTC)) is None


def test_latest_until_includes_an_occurrence_at_that_very_moment() -> None:
    for schedule in (
        Schedule.cron("c", "0 * * * *"),
        Schedule.every("e", timedelta(hours=1)),
        Schedule.once("o", at=datetime(2028, 5, 1, 10, tzinfo=UTC)),
    ):
        at = datetime(2028, 5, 1, 10, tzinfo=UTC)
        assert schedule.latest_until(at) == at
        assert schedule.next_after(at) != at


def test_jitter_is_the_same_for_an_occurrence_everywhere_and_within_its_bound() -> None:
    jittered = Schedule.every("j", timedelta(minutes=5), jitter=timedelta(seconds=30))
    occurrences = year_of(jittered)[:500]
    delays = [jittered.jitter_of(o) for o in occurrences]
    assert all(timedelta(0) <= d < timedelta(seconds=30) for d in delays)
    assert len(set(delays)) > 100  # spread, not one offset
    again = Schedule.every("j", timedelta(minutes=5), jitter=timedelta(seconds=30))
    assert [again.jitter_of(o) for o in occurrences] == delays
    assert Schedule.every("k", timedelta(minutes=5)).jitter_of(occurrences[0]) == timedelta(0)


def test_an_occurrence_has_one_run_id_per_environment_schedule_and_time() -> None:
    at = datetime(2028, 1, 1, 9, tzinfo=UTC)
    run_id = occurrence_run_id("prod", "digests.daily", at)
    assert run_id == occurrence_run_id("prod", "digests.daily", at)
    assert len(run_id) == 32 and int(run_id, 16) >= 0
    others = {
        occurrence_run_id("staging", "digests.daily", at),
        occurrence_run_id("prod", "digests.hourly", at),
        occurrence_run_id("prod", "digests.daily", at + timedelta(milliseconds=1)),
    }
    assert run_id not in others and len(others) == 3


def test_a_stored_definition_reads_back_equal_and_a_change_changes_its_fingerprint() -> None:
    schedule = Schedule.cron(
        "digests.daily",
        "0 9 * * *",
        tz="Europe/Paris",
        payload={"kind": "daily", "text": "<b>é\u202e</b>"},
        catch_up="all",
        jitter=12.5,
        start_at=datetime(2027, 1, 1, tzinfo=UTC),
    ).for_task("digests.send", "default")
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert Schedule.from_json(schedule.to_json()).fingerprint == schedule.fingerprint
    changed = Schedule.cron("digests.daily", "0 10 * * *", tz="Europe/Paris").for_task(
        "digests.send", "default"
    )
    assert changed.fingerprint != schedule.fingerprint
    assert schedule.catch_up is CatchUp.ALL and schedule.kind is ScheduleKind.CRON


# --- bad input ---------------------------------------------------------------------

BAD_SCHEDULES = {
    "invalid cron": lambda: Schedule.cron("a", "61 * * * *"),
    "cron with too few fields": lambda: Schedule.cron("a", "* * *"),
    "cron with seconds": lambda: Schedule.cron("a", "* * * * * *"),
    "cron alias": lambda: Schedule.cron("a", "@daily"),
    "cron that is not text": lambda: Schedule.cron("a", 5),  # type: ignore[arg-type]
    "unknown time zone": lambda: Schedule.cron("a", "0 9 * * *", tz="Mars/Olympus"),
    "time zone path": lambda: Schedule.cron("a", "0 9 * * *", tz="../../etc/passwd"),
    "empty id": lambda: Schedule.every("", 60),
    "id with #": lambda: Schedule.every("a#b", 60),
    "id with markup": lambda: Schedule.every("<b>x</b>", 60),
    "id with control character": lambda: Schedule.every("a\x1b[31m", 60),
    "id with a lone surrogate": lambda: Schedule.every("a\udcff", 60),
    "id too long": lambda: Schedule.every("a" * 129, 60),
    "id not text": lambda: Schedule.every(7, 60),  # type: ignore[arg-type]
    "zero interval": lambda: Schedule.every("a", 0),
    "fractional interval": lambda: Schedule.every("a", 1.5),
    "negative interval": lambda: Schedule.every("a", -60),
    "naive once": lambda: Schedule.once("a", at=datetime(2028, 1, 1)),
    "naive start": lambda: Schedule.every("a", 60, start_at=datetime(2028, 1, 1)),
    "end before start": lambda: Schedule.every(
        "a", 60, start_at=datetime(2028, 1, 2, tzinfo=UTC), end_at=datetime(2028, 1, 1, tzinfo=UTC)
    ),
    "unknown catch-up": lambda: Schedule.every("a", 60, catch_up="some"),
    "negative jitter": lambda: Schedule.every("a", 60, jitter=-1),
    "bad queue": lambda: Schedule.every("a", 60, queue="no spaces"),
}


@pytest.mark.parametrize("build", BAD_SCHEDULES.values(), ids=BAD_SCHEDULES.keys())
def test_a_bad_definition_is_refused_with_a_clear_error(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError) as refused:
        build()
    assert str(refused.value).isprintable()  # hostile text is quoted, never echoed raw


def _noop(ctx: object, payload: object) -> None:
    return None


def test_registration_refuses_duplicate_ids_and_keeps_nothing_of_the_task() -> None:
    app = in_memory_app()
    app.task(_noop, name="a", schedules=[Schedule.every("shared", 60)])
    with pytest.raises(ConfigurationError, match="'shared' is already registered"):
        app.task(
            _noop, name="b", schedules=[Schedule.every("own", 60), Schedule.every("shared", 120)]
        )
    with pytest.raises(ConfigurationError, match="'twice' is already registered"):
        app.task(
            _noop, name="c", schedules=[Schedule.every("twice", 60), Schedule.every("twice", 60)]
        )
    assert app.tasks.names() == ["a"]
    assert [s.id for s in app.tasks.schedules()] == ["shared"]


def test_registration_refuses_a_schedule_firing_more_often_than_maintenance_runs() -> None:
    app = in_memory_app(maintenance_period=300)
    for fast in (
        Schedule.every("fast", 60),
        Schedule.cron("fast", "*/2 * * * *"),
        Schedule.cron("fast", "0,1 9 * * *"),  # twice a day, a minute apart
    ):
        with pytest.raises(ConfigurationError, match="less than the maintenance period"):
            app.task(_noop, name="a", schedules=[fast])
    app.task(
        _noop,
        name="b",
        schedules=[Schedule.every("ok", 300), Schedule.cron("ok.cron", "*/5 * * * *")],
    )
    assert [s.id for s in app.tasks.schedules()] == ["ok", "ok.cron"]
    two_hours = in_memory_app(maintenance_period=7200)
    two_hours.task(_noop, name="a", schedules=[Schedule.cron("even", "0 */2 * * *")])
    with pytest.raises(ConfigurationError, match="1:00:00 apart"):  # Paris falls back
        two_hours.task(
            _noop, name="b", schedules=[Schedule.cron("paris", "0 */2 * * *", tz="Europe/Paris")]
        )
    every_minute = in_memory_app()  # the default period: any five-field cron expression
    every_minute.task(_noop, name="a", schedules=[Schedule.cron("each", "* * * * *")])


def test_registration_refuses_a_payload_that_is_not_json_or_too_large() -> None:
    app = in_memory_app(payload_limit=64)
    with pytest.raises(InvalidPayloadError):
        app.task(_noop, name="a", schedules=[Schedule.every("s", 60, payload={"x": object()})])
    with pytest.raises(PayloadTooLarge):
        app.task(_noop, name="b", schedules=[Schedule.every("s", 60, payload="x" * 100)])
    with pytest.raises(ConfigurationError, match="list of Schedule"):
        app.task(_noop, name="c", schedules=Schedule.every("s", 60))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Schedule values"):
        app.task(_noop, name="d", schedules=["0 9 * * *"])  # type: ignore[list-item]
    assert app.tasks.names() == [] and app.tasks.schedules() == []


def test_a_registered_schedule_is_bound_to_its_task_and_queue() -> None:
    app = in_memory_app()
    task = app.task(
        _noop,
        name="digests.send",
        queue="emails",
        schedules=[Schedule.every("a", 60), Schedule.every("b", 60, queue="urgent")],
    )
    assert [(s.task, s.queue) for s in task.schedules] == [
        ("digests.send", "emails"),
        ("digests.send", "urgent"),
    ]
