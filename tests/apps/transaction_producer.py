"""A producer that commits a transactional trigger and then stops before publishing:
``python -m tests.apps.transaction_producer TABLE ORDER_ID`` (the crash window of
tests/processes/test_transaction_processes.py).

It writes the order and triggers ``orders.ship`` in one transaction, prints
``committed RUN_ID`` once DynamoDB has committed, and waits there for the test to kill
it: the wakeup is never published by this process."""

from __future__ import annotations

import sys
import threading
from typing import Any

from runlane_sqs import Runlane, TaskContext
from runlane_sqs.api.transactions import Transaction

SHIP = "orders.ship"


def register(app: Runlane) -> Runlane:
    @app.task(name=SHIP)
    def ship(ctx: TaskContext, payload: Any) -> Any:
        return {"shipped": payload["order"], "attempt": ctx.attempt}

    return app


def stop_after_the_commit(transaction: Transaction) -> Any:
    """In place of publishing: say the run is committed, then wait to be killed."""
    [run] = [new.run for new in transaction._new]
    print(f"committed {run.id}", flush=True)
    threading.Event().wait()


def main(table: str, order_id: str) -> None:
    app = register(Runlane.from_env())
    Transaction.committed = stop_after_the_commit  # type: ignore[method-assign]
    with app.transaction() as tx:
        tx.put(table, {"id": order_id})
        tx.trigger(SHIP, {"order": order_id})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
