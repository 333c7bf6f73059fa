"""An app with rate limits for the acceptance tests:
``tests.processes.cli.apps.rates_app:app``. Queue ``partner`` starts at most 5 runs a
second (a burst of 1); ``crm.sync`` on it at most 2 a second per tenant."""

from __future__ import annotations

from typing import Any

from runlane_sqs import RateLimit, Runlane, TaskContext

APP_SPEC = "tests.processes.cli.apps.rates_app:app"
PARTNER = "partner"
PARTNER_LIMIT = RateLimit(5, per=1, burst=1)
TASK = "crm.sync"


def _done(ctx: TaskContext, payload: Any) -> Any:
    return payload


def build() -> Runlane:
    """The app, from the ``RUNLANE_*`` and ``AWS_*`` variables set now."""
    app = Runlane.from_env()
    app.task(
        _done,
        name=TASK,
        queue=app.queue(PARTNER, rate_limit=PARTNER_LIMIT),
        concurrency_key=lambda payload: str(payload["tenant"]),
        rate_limits=[RateLimit(2, per=1, per_key=True)],
    )
    return app


app = build()
