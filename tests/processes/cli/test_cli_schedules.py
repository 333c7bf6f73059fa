"""Schedules from the command line: maintenance stores the app's schedules, ``schedules
list|get`` show them with their next occurrences, pause and resume take them off and
back on, ``schedules trigger`` makes a linked run, and a bad id is a clear error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.processes.cli.apps.schedules_app import (
    ADHOC,
    APP_SPEC,
    DAILY,
    DAILY_HOUR,
    DAILY_TZ,
    HOURLY,
)
from tests.processes.cli.conftest import Cli, Done

EXIT_USAGE = 2
EXIT_NOT_FOUND = 5
NO_APP = "RUNLANE_APP"
HOSTILE_IDS = ["<b>x</b>", "a#b", "\x1b[31m"]
"""Ids no schedule can have: markup, the storage key separator, a terminal command."""


@pytest.fixture
def app_cli(cli: Cli, provisioned: dict[str, str]) -> Cli:
    """The CLI with the schedules app as ``RUNLANE_APP`` (table and queue provisioned)."""
    runner = Cli({**cli.env, NO_APP: APP_SPEC}, cli.log_dir)
    runner.started = cli.started
    return runner


def _utc(at: datetime) -> str:
    """How the CLI writes a time (computed here without the library's helper)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def daily_after(moment: datetime, count: int = 3) -> list[str]:
    """The next ``count`` 09:00s in Paris strictly after ``moment``."""
    zone = ZoneInfo(DAILY_TZ)
    day = moment.astimezone(zone).date()
    found: list[str] = []
    while len(found) < count:
        at = datetime.combine(day, time(DAILY_HOUR), tzinfo=zone)
        if at > moment:
            found.append(_utc(at))
        day += timedelta(days=1)
    return found


def hourly_after(moment: datetime, count: int = 3) -> list[str]:
    """The next ``count`` whole UTC hours strictly after ``moment``."""
    hour = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [_utc(hour + timedelta(hours=n)) for n in range(1, count + 1)]


def stored_between(
    before: datetime, after: datetime, expected: Callable[[datetime], list[str]]
) -> list[list[str]]:
    """What a schedule stored between two moments can list (an occurrence may pass
    while the command runs)."""
    return [expected(before), expected(after)]


def now() -> datetime:
    return datetime.now(UTC)


def error_line(done: Done) -> str:
    """The one line of stderr saying why (click's usage errors start ``Error:``)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.lower().startswith("error: ")]
    assert len(lines) == 1, f"{done.args} exited {done.code}:\n{done.stderr}"
    return lines[0]


def table_rows(text: str) -> dict[str, str]:
    """The rows of ``schedules list`` by schedule id."""
    return {line.split()[0]: line for line in text.splitlines() if line.startswith("reports.")}


def test_maintenance_stores_the_apps_schedules_and_list_shows_their_next_occurrences(
    app_cli: Cli,
) -> None:
    before = now()
    app_cli.ok("maintenance", "run")
    after = now()
    operator = app_cli.without(NO_APP)  # schedules are read from storage

    listed, table, daily, hourly = operator.many(
        [
            ("schedules", "list", "--json"),
            ("schedules", "list"),
            ("schedules", "get", DAILY, "--json"),
            ("schedules", "get", HOURLY, "--json"),
        ]
    )

    by_id = {s["id"]: s for s in listed.json()}
    assert list(by_id) == [DAILY, HOURLY]
    assert daily.json()["upcoming"] in stored_between(before, after, daily_after)
    assert hourly.json()["upcoming"] in stored_between(before, after, hourly_after)
    assert by_id[DAILY] == daily.json()  # list and get print one shape
    shown = daily.json()
    assert {k: shown[k] for k in ("task", "queue", "kind", "definition", "expression", "tz")} == {
        "task": "reports.build",
        "queue": "default",
        "kind": "cron",
        "definition": f"cron 0 {DAILY_HOUR} * * * ({DAILY_TZ})",
        "expression": f"0 {DAILY_HOUR} * * *",
        "tz": DAILY_TZ,
    }
    assert (shown["status"], shown["next_at"], shown["last_at"], shown["runs"]) == (
        "active",
        shown["upcoming"][0],
        None,
        0,
    )
    assert (shown["payload"], shown["interval_seconds"]) == ({"report": "daily"}, None)
    assert (hourly.json()["interval_seconds"], hourly.json()["definition"]) == (
        3600,
        "every 1:00:00",
    )

    assert table.code == 0, table.stderr
    rows = table_rows(table.stdout)
    assert set(rows) == {DAILY, HOURLY}
    for schedule_id, definition in ((DAILY, "cron 0 9 * * * (Europe/Paris)"), (HOURLY, "every")):
        row = rows[schedule_id]
        assert "active" in row and definition in row, row
        assert by_id[schedule_id]["upcoming"][0] in row, row


def test_get_stores_a_schedule_the_app_defines_and_shows_its_next_three_occurrences(
    app_cli: Cli,
) -> None:
    operator = app_cli.without(NO_APP)
    unstored = operator("schedules", "get", DAILY)  # no app to define it, nothing stored
    assert unstored.code == EXIT_NOT_FOUND, unstored.stderr
    assert error_line(unstored) == f"error: schedule '{DAILY}' not found"

    before = now()
    shown = app_cli("schedules", "get", DAILY, "--json").json()
    after = now()

    assert shown["upcoming"] in stored_between(before, after, daily_after)
    assert all(at.endswith(":00:00.000Z") for at in shown["upcoming"])
    table = operator.ok("schedules", "get", DAILY).stdout  # stored now: found without the app
    assert f"schedule {DAILY}" in table
    assert ", ".join(shown["upcoming"]) in table
    assert f"cron 0 {DAILY_HOUR} * * * ({DAILY_TZ})" in table


def test_a_paused_schedule_lists_as_paused_with_no_upcoming_occurrence_until_resumed(
    app_cli: Cli,
) -> None:
    app_cli.ok("maintenance", "run")
    active = app_cli("schedules", "get", HOURLY, "--json").json()
    assert len(active["upcoming"]) == 3

    paused = app_cli.ok("schedules", "pause", HOURLY)
    assert paused.stdout.strip() == f"schedule {HOURLY} is paused"

    listed, table, again = app_cli.many(
        [
            ("schedules", "list", "--json"),
            ("schedules", "list"),
            ("schedules", "pause", HOURLY, "--json"),
        ]
    )
    by_id = {s["id"]: s for s in listed.json()}
    assert (by_id[HOURLY]["status"], by_id[HOURLY]["upcoming"]) == ("paused", [])
    assert (by_id[DAILY]["status"], len(by_id[DAILY]["upcoming"])) == ("active", 3)
    row = table_rows(table.stdout)[HOURLY]
    assert "paused" in row and active["upcoming"][0] not in row, row
    assert again.json()["status"] == "paused"  # pausing a paused schedule changes nothing
    assert again.json()["version"] == by_id[HOURLY]["version"]

    resumed = app_cli("schedules", "resume", HOURLY, "--json").json()
    assert (resumed["status"], resumed["upcoming"]) == ("active", active["upcoming"])
    assert app_cli.ok("schedules", "resume", HOURLY).stdout.strip() == (
        f"schedule {HOURLY} is active"
    )


def test_trigger_makes_a_run_linked_to_the_schedule_and_runs_list_filters_by_it(
    app_cli: Cli,
) -> None:
    app_cli.ok("maintenance", "run")
    operator = app_cli.without(NO_APP)

    first, second, daily, adhoc = operator.many(
        [
            ("schedules", "trigger", HOURLY),
            ("schedules", "trigger", HOURLY, "--json"),
            ("schedules", "trigger", DAILY, "--json"),
            ("trigger", ADHOC, "--json", "--app", APP_SPEC),
        ]
    )
    assert first.code == 0, first.stderr
    (first_id,) = first.stdout.split()
    second_run = second.json()
    assert (second_run["schedule_id"], second_run["task"], second_run["status"]) == (
        HOURLY,
        "reports.build",
        "queued",
    )
    assert second_run["payload"] == {"report": "hourly"}

    shown, by_schedule, table = operator.many(
        [
            ("runs", "get", first_id, "--json"),
            ("runs", "list", "--schedule", HOURLY, "--json"),
            ("runs", "list", "--schedule", DAILY),
        ]
    )
    assert (shown.json()["schedule_id"], shown.json()["scheduled_for"]) == (HOURLY, None)
    # an occurrence run is there too when the hour turned since an earlier test's pass
    # synced the schedule: the operator's runs are the ones without an occurrence
    triggered = {r["id"] for r in by_schedule.json()["runs"] if r["scheduled_for"] is None}
    assert triggered == {first_id, second_run["id"]}
    assert daily.json()["id"] in table.stdout
    assert first_id not in table.stdout and adhoc.json()["id"] not in table.stdout

    executed = app_cli.ok("worker", "--drain").stdout.strip()
    assert executed == f"executed {4 + len(by_schedule.json()['runs']) - 2} run(s)"
    done = operator("runs", "get", first_id, "--json").json()
    assert (done["status"], done["result"]) == ("succeeded", {"built": {"report": "hourly"}})


def test_an_unknown_schedule_is_not_found_with_a_one_line_reason(app_cli: Cli) -> None:
    app_cli.ok("maintenance", "run")
    results = app_cli.many(
        [
            ("schedules", "get", "reports.weekly"),
            ("schedules", "pause", "reports.weekly"),
            ("schedules", "resume", "reports.weekly", "--json"),
            ("schedules", "trigger", "reports.weekly"),
        ]
    )
    for done in results:
        assert done.code == EXIT_NOT_FOUND, f"{done.args} exited {done.code}:\n{done.stderr}"
        assert done.stderr == "error: schedule 'reports.weekly' not found\n"
        assert done.stdout == ""


@pytest.mark.parametrize("schedule_id", HOSTILE_IDS, ids=["markup", "hash", "escape"])
def test_an_id_no_schedule_can_have_is_a_usage_error_shown_escaped(
    app_cli: Cli, schedule_id: str
) -> None:
    results = app_cli.many(
        [
            ("schedules", "get", schedule_id),
            ("schedules", "pause", schedule_id),
            ("schedules", "trigger", schedule_id, "--json"),
            ("runs", "list", "--schedule", schedule_id),
        ]
    )
    shown = ascii(schedule_id)  # what the error quotes: the escape sequence, never ESC
    for done in results:
        assert done.code == EXIT_USAGE, f"{done.args} exited {done.code}:\n{done.stderr}"
        line = error_line(done)
        assert f"{shown} is not a schedule id (letters, digits" in line, line
        assert "\x1b" not in done.stderr
        assert done.stdout == ""
    assert app_cli("schedules", "list", "--json").json() == []  # nothing was stored
