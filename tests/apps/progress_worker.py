"""Worker app of the progress process test (tests/processes/test_progress_processes.py):
``--app tests.apps.progress_worker:app``. ``progress.report`` reports its progress
``payload["reports"]`` times over ``payload["seconds"]`` seconds, then returns."""

from __future__ import annotations

import time
from typing import Any

from runlane_sqs import Runlane, TaskContext

REPORT = "progress.report"


def register(app: Runlane) -> Runlane:
    @app.task(name=REPORT)
    def report(ctx: TaskContext, payload: dict[str, Any]) -> int:
        reports, seconds = int(payload["reports"]), float(payload["seconds"])
        started = time.monotonic()
        for done in range(1, reports + 1):
            ctx.progress(done, reports, message=f"report {done}")
            time.sleep(max(0.0, started + done * seconds / reports - time.monotonic()))
        ctx.set_state({"reports": reports})
        return reports

    return app


app = register(Runlane.from_env())
