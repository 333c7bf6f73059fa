"""The tasks the console's browser test triggers (tests/browser): a charge that fails for
a declined order while the gateway is down (a worker with ``SHOP_GATEWAY=down``) and goes
through once it is back (the retry), one that waits for a token, a nightly report on a
schedule, and a refund whose payload is a pydantic model (triggered from its page). The
workers run them from a copy of this package in a neutral directory, so that a failure's
traceback names no path of the machine; the test process registers them to trigger
runs."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from runlane_sqs import RetryPolicy, Runlane, Schedule, TaskContext

CHARGE = "shop.charge"
APPROVAL = "shop.approval"
REPORT = "shop.report"
NIGHTLY = "shop.nightly-report"
INVOICES = "shop.invoices"
"""Renders one invoice per order of ``payload["orders"]`` with ``ctx.map``."""
REFUND = "shop.refund"
"""Takes a :class:`Refund`: the console's trigger form validates it."""
GATEWAY = "SHOP_GATEWAY"
"""``down`` in a worker's environment: declined orders fail; unset: they go through."""


class Refund(BaseModel):
    order: int
    amount_cents: int
    note: str = ""


def register_console_tasks(app: Runlane) -> Runlane:
    @app.task(name=CHARGE, retry=RetryPolicy(max_attempts=1))
    def charge(ctx: TaskContext, payload: Any) -> Any:
        if payload.get("declined") and os.environ.get(GATEWAY) == "down":
            raise RuntimeError(f"card declined for order {payload['order']}")
        return {"charged": payload["order"]}

    @app.task(name=APPROVAL)
    def approval(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value

    @app.task(name=INVOICES)
    def invoices(ctx: TaskContext, payload: Any) -> Any:
        orders = [{"order": n} for n in payload["orders"]]
        return ctx.map(CHARGE, orders, max_in_flight=2).succeeded

    @app.task(name=REPORT, schedules=[Schedule.cron(NIGHTLY, "30 2 * * *")])
    def report(ctx: TaskContext, payload: Any) -> Any:
        return None

    @app.task(name=REFUND)
    def refund(ctx: TaskContext, wanted: Refund) -> dict[str, int]:
        return {"order": wanted.order, "refunded": wanted.amount_cents}

    return app
