"""Maintenance app for the schedule race test: ``--app tests.apps.schedule_app:app``.

One task with four schedules, 200 occurrences in all, every one of them in the past:
each starts at ``ANCHOR`` and ends at its last occurrence (``end_at``), with catch-up
``all``. Stored by an app whose clock stands just before ``ANCHOR``, they are what a
maintenance that was down since then has missed; maintenance creates them 50 per
schedule per pass. The test registers the same schedules with
:func:`register_schedules`, so its app and the processes' agree on every definition
(and the processes' sync finds nothing to write).

With ``RUNLANE_TEST_START_FILE`` set, importing this module waits until that file
exists (after leaving ``<file>.<pid>.ready``), so the test starts the passes of several
processes together.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runlane_sqs import CatchUp, Runlane, Schedule, TaskContext
from runlane_sqs.core.model import JSON

TICK_TASK = "schedules.tick"
MAINTENANCE_PERIOD_SECONDS = 1
"""The shortest interval a schedule may have is the app's maintenance period."""
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
"""The first occurrence of every schedule (long past)."""
START_FILE_ENV = "RUNLANE_TEST_START_FILE"
START_TIMEOUT_SECONDS = 60.0
START_POLL_SECONDS = 0.005


def _every(schedule_id: str, seconds: int, count: int) -> Schedule:
    """``count`` occurrences, ``seconds`` apart, from ``ANCHOR``."""
    return Schedule.every(
        schedule_id,
        seconds,
        payload={"schedule": schedule_id},
        catch_up=CatchUp.ALL,
        start_at=ANCHOR,
        end_at=ANCHOR + timedelta(seconds=seconds * (count - 1)),
    )


SCHEDULES = (
    _every("tick-1s", 1, 110),
    _every("tick-2s", 2, 40),
    _every("tick-7s", 7, 30),
    Schedule.cron(
        "tick-minutely",
        "* * * * *",
        payload={"schedule": "tick-minutely"},
        catch_up=CatchUp.ALL,
        start_at=ANCHOR,
        end_at=ANCHOR + timedelta(minutes=19),
    ),
)
TICKS = 200
"""Occurrences of the four schedules together (110 + 40 + 30 + 20)."""


def tick(ctx: TaskContext, payload: JSON) -> JSON:
    return payload


def register_schedules(app: Runlane) -> Runlane:
    app.task(tick, name=TICK_TASK, schedules=SCHEDULES)
    return app


def ready_file(start_file: Path, pid: int) -> Path:
    """Where a process waiting for ``start_file`` says so."""
    return start_file.with_name(f"{start_file.name}.{pid}.ready")


def _wait_for_start() -> None:
    named = os.environ.get(START_FILE_ENV)
    if not named:
        return
    start_file = Path(named)
    ready_file(start_file, os.getpid()).touch()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not start_file.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{start_file} did not appear in {START_TIMEOUT_SECONDS} s")
        time.sleep(START_POLL_SECONDS)


_wait_for_start()
app = register_schedules(Runlane.from_env(maintenance_period=MAINTENANCE_PERIOD_SECONDS))
