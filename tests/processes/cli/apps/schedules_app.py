"""An app with schedules for the acceptance tests: ``tests.processes.cli.apps.schedules_app:app``.

Built from the environment at import (in every CLI process). ``reports.build`` runs on
two schedules, ``reports.adhoc`` on none.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runlane_sqs import Runlane, Schedule, TaskContext

APP_SPEC = "tests.processes.cli.apps.schedules_app:app"
BUILD = "reports.build"
ADHOC = "reports.adhoc"
DAILY = "reports.daily"
"""At 09:00 in Paris, every day."""
DAILY_TZ = "Europe/Paris"
DAILY_HOUR = 9
HOURLY = "reports.hourly"
"""On the hour (UTC), every hour."""

app = Runlane.from_env()


@app.task(
    name=BUILD,
    schedules=[
        Schedule.cron(DAILY, f"0 {DAILY_HOUR} * * *", tz=DAILY_TZ, payload={"report": "daily"}),
        Schedule.every(HOURLY, timedelta(hours=1), payload={"report": "hourly"}),
    ],
)
def build(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    return {"built": payload}


@app.task(name=ADHOC)
def adhoc(ctx: TaskContext, payload: Any) -> None:
    return None
