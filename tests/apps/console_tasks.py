"""The tasks the console's browser test triggers (tests/browser): a charge whose first
attempt for a declined order fails (the retry, in the same process, succeeds), one that
waits for a token, and a nightly report on a schedule. Only the test process runs them;
the console process only needs them registered."""

from __future__ import annotations

from typing import Any

from runlane_sqs import RetryPolicy, Runlane, Schedule, TaskContext

CHARGE = "shop.charge"
APPROVAL = "shop.approval"
REPORT = "shop.report"
NIGHTLY = "shop.nightly-report"


def register_console_tasks(app: Runlane) -> Runlane:
    declined: set[Any] = set()

    @app.task(name=CHARGE, retry=RetryPolicy(max_attempts=1))
    def charge(ctx: TaskContext, payload: Any) -> Any:
        if payload.get("declined") and payload["order"] not in declined:
            declined.add(payload["order"])
            raise RuntimeError(f"card declined for order {payload['order']}")
        return {"charged": payload["order"]}

    @app.task(name=APPROVAL)
    def approval(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value

    @app.task(name=REPORT, schedules=[Schedule.cron(NIGHTLY, "30 2 * * *")])
    def report(ctx: TaskContext, payload: Any) -> Any:
        return None

    return app
