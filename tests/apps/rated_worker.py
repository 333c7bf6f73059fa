"""Worker app of the rate limit process tests (tests/processes/test_rate_limit_processes.py):
``--app tests.apps.rated_worker:app``. ``partner.call`` may start 10 times a second;
``tenant.sync`` 10 times a second in all and twice a second per tenant. ``partner.enter``
(5 a second) and ``tenant.enter`` (twice a second per tenant) return when their handler
was entered, by the worker's clock (``time.time()``, first thing in the handler)."""

from __future__ import annotations

import time
from typing import Any

from runlane_sqs import RateLimit, Runlane, TaskContext

TASK = "partner.call"
RATE = 10
KEYED = "tenant.sync"
PER_TENANT = 2
ENTER = "partner.enter"
ENTER_LIMIT = RateLimit(5, per=1)
ENTER_KEYED = "tenant.enter"
ENTER_KEYED_LIMIT = RateLimit(2, per=1, per_key=True)


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

    @app.task(name=ENTER, rate_limits=[ENTER_LIMIT])
    def enter(ctx: TaskContext, payload: Any) -> Any:
        return {"entered": time.time()}

    @app.task(
        name=ENTER_KEYED, concurrency_key=lambda p: p["tenant"], rate_limits=[ENTER_KEYED_LIMIT]
    )
    def enter_keyed(ctx: TaskContext, payload: Any) -> Any:
        return {"entered": time.time()}

    return app


app = register(Runlane.from_env())
