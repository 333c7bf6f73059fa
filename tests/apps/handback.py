"""Worker app of the stop hand-back tests (tests/processes/test_stop_handback.py):
``--app tests.apps.handback:app``. ``handback.rated`` may start once every 15 s, so a
run triggered just after another waits for its reserved start with its wakeup held by
the worker; ``handback.blocker`` keeps its slot until its cancellation is set."""

from __future__ import annotations

from typing import Any

from runlane_sqs import RateLimit, Runlane, TaskContext

RATED = "handback.rated"
BLOCKER = "handback.blocker"
RATE_INTERVAL_SECONDS = 15
"""Inside the 20 s a worker holds a wakeup for its run's reserved start (``MAX_HOLD``)."""
BLOCK_SECONDS = 60


def register(app: Runlane) -> Runlane:
    @app.task(name=RATED, rate_limits=[RateLimit(1, per=RATE_INTERVAL_SECONDS)])
    def rated(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=BLOCKER)
    def blocker(ctx: TaskContext, payload: Any) -> Any:
        return {"cancelled": ctx.cancellation.wait(BLOCK_SECONDS)}

    return app


app = register(Runlane.from_env())
