"""Worker app of the queue weights test (tests/processes/test_queue_weight_processes.py):
``--app tests.apps.weighted_worker:app``; ``urgent.send`` on queue ``high``,
``bulk.send`` on queue ``low``."""

from __future__ import annotations

from typing import Any

from runlane_sqs import Runlane, TaskContext

HIGH, LOW = "high", "low"
URGENT, BULK = "urgent.send", "bulk.send"


def register(app: Runlane) -> Runlane:
    @app.task(name=URGENT, queue=HIGH)
    def urgent(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=BULK, queue=LOW)
    def bulk(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


app = register(Runlane.from_env())
