"""Worker app of the rate limit process tests (tests/processes/test_rate_limit_processes.py):
``--app tests.apps.rated_worker:app``. ``partner.call`` may start 10 times a second;
``tenant.sync`` 10 times a second in all and twice a second per tenant."""

from __future__ import annotations

from typing import Any

from runlane_sqs import RateLimit, Runlane, TaskContext

TASK = "partner.call"
RATE = 10
KEYED = "tenant.sync"
PER_TENANT = 2


def register(app: Runlane) -> Runlane:
    @app.task(name=TASK, rate_limits=[RateLimit(RATE, per=1)])
    def call(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(
        name=KEYED,
        concurrency_key=lambda p: p["tenant"],
        rate_limits=[RateLimit(RATE, per=1), RateLimit(PER_TENANT, per=1, per_key=True)],
    )
    def sync(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


app = register(Runlane.from_env())
