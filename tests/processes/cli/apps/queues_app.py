"""An app with concurrency limits for the acceptance tests:
``tests.processes.cli.apps.queues_app:app``.

Built from the environment at import (in every CLI process); a test builds its own with
:func:`build` once its environment is set. ``billing.sync`` runs on the ``billing``
queue, limited to one run at a time; ``invoices.sync`` on the unlimited ``invoices``
queue, at most two runs per customer.
"""

from __future__ import annotations

from typing import Any

from runlane_sqs import Runlane, TaskContext

APP_SPEC = "tests.processes.cli.apps.queues_app:app"
BILLING = "billing"
BILLING_LIMIT = 1
INVOICES = "invoices"
KEY_LIMIT = 2
TASK = "billing.sync"
KEYED = "invoices.sync"


def _done(ctx: TaskContext, payload: Any) -> Any:
    return payload


def _customer(payload: Any) -> str:
    return str(payload["customer"])


def build() -> Runlane:
    """The app, from the ``RUNLANE_*`` and ``AWS_*`` variables set now."""
    app = Runlane.from_env()
    app.task(_done, name=TASK, queue=app.queue(BILLING, concurrency_limit=BILLING_LIMIT))
    app.task(_done, name=KEYED, queue=INVOICES, concurrency_key=_customer, key_limit=KEY_LIMIT)
    return app


app = build()
