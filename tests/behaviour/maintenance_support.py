"""What the maintenance behaviour tests (test_maintenance_passes.py,
test_maintenance_repairs.py) share: the queue they use, how they read and add wakeups
(``take_wakeups``, ``resend``), runs only maintenance can publish (``due_runs``,
``store_due_run`` over ids spread on the agenda shards), a lease claimed by a worker that
then dies, and the count a pass published."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from runlane_sqs import Runlane
from runlane_sqs.core import machine
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.indexes import AGENDA_SHARDS
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.wakeup import Wakeup, parse_wakeup
from runlane_sqs.engine.reports import JOB_DUE, PassReport
from tests.apps.recovery_tasks import PLAIN_TASK

QUEUE = "default"


def take_wakeups(app: Runlane) -> Counter[str]:
    """Receive and delete every visible wakeup; count them by run id."""
    seen: Counter[str] = Counter()
    while messages := app.transport.receive(QUEUE, 10, 0):
        seen.update(parse_wakeup(m.body).run_id for m in messages)
        app.transport.ack(messages)
    return seen


def resend(app: Runlane, *runs: Run) -> None:
    """One more wakeup for each run, as a duplicate or late delivery brings."""
    now = app.clock.now()
    wakeups = [
        Wakeup(environment=r.environment, run_id=r.id, queue=r.queue, requested_at=now)
        for r in runs
    ]
    assert app.transport.publish(wakeups) == []


def due_runs(app: Runlane, clock: ManualClock, count: int) -> list[Run]:
    """``count`` runs due now whose wakeups only maintenance can publish (delayed past
    SQS's 15 minute limit, then the clock moved to their due time)."""
    runs = [app.trigger(PLAIN_TASK, {"n": n}, delay=timedelta(hours=1)) for n in range(count)]
    clock.advance(timedelta(hours=1))
    return runs


def store_due_run(app: Runlane, run_id: str) -> Run:
    """Write a run due now with no wakeup published (as maintenance would find it)."""
    run, event = machine.new_run(
        run_id=run_id,
        environment=app.config.environment,
        task=PLAIN_TASK,
        queue=QUEUE,
        payload={"id": run_id},
        now=app.clock.now(),
    )
    app.store.create_run(run, event, json.dumps(run.payload))
    return run


def run_ids_by_shard(per_shard: int) -> list[str]:
    """Run ids spread evenly over the agenda shards (``per_shard`` in each)."""
    chosen: dict[int, list[str]] = {s: [] for s in range(AGENDA_SHARDS)}
    while any(len(ids) < per_shard for ids in chosen.values()):
        run_id = uuid.uuid4().hex
        ids = chosen[int(run_id[:4], 16) % AGENDA_SHARDS]
        if len(ids) < per_shard:
            ids.append(run_id)
    return [run_id for ids in chosen.values() for run_id in ids]


def claim(app: Runlane, run_id: str, *, owner: str, token: str, timeout: Any = None) -> Run:
    """Claim the lease as a worker that then gets stuck (or dies) would."""
    decision = machine.claim_lease(
        app.runs.get(run_id),
        now=app.clock.now(),
        owner=owner,
        token=token,
        duration=app.config.lease_duration,
        timeout=timeout,
    )
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)


def published(report: PassReport) -> int:
    """How many due runs the pass published."""
    return report.jobs[JOB_DUE].published
