"""What the worker behaviour tests (test_worker.py, test_worker_shutdown.py) share, and the
pieces the other behaviour areas use too: the sync worker (``SYNC_WORKER``, ``drain``) for
scenarios where the kind of worker does not matter, a run's history (``event_types``) and
status, a second app on the same table and queues, and a lease claimed by another worker.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs import EventType, RetryPolicy, Runlane, RunStatus
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, Slot, new_lease_token
from tests.backends import Backend
from tests.workers import SYNC, WorkerKind

LONG_LEASE = timedelta(minutes=5)
"""Long in real time too: heartbeats (every third of it) never fire during a test."""
RETRY_AT_ONCE = RetryPolicy(max_attempts=3, backoff="fixed", delay=0)
SYNC_WORKER = WorkerKind(SYNC)
"""For scenarios where the kind of worker does not matter (test_worker.py and
test_worker_shutdown.py hold both kinds)."""


def drain(app: Runlane, max_runs: int | None = None, **options: Any) -> int:
    """Process the work available now with a sync worker built with ``options``."""
    return SYNC_WORKER.drain(app, max_runs, **options)


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    """The types of the run's events, checked to be numbered 1, 2, 3... without a gap."""
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def status(app: Runlane, run_id: str) -> RunStatus:
    return app.runs.get(run_id).status


def second_app(
    backend: Backend, app: Runlane, register: Callable[[Runlane], object], **options: Any
) -> Runlane:
    """Another worker's (or deployment's) app on the same table and queues as ``app``,
    built with ``options``."""
    if backend.real:
        return backend.app(register=register, **options)
    other = Runlane(
        environment=app.config.environment,
        clock=backend.clock,
        store=app.store,
        transport=app.transport,
        **options,
    )
    register(other)
    return other


def claim_elsewhere(
    app: Runlane,
    run_id: str,
    owner: str = "worker-elsewhere",
    now: datetime | None = None,
    slots: tuple[Slot, ...] | None = None,
) -> Run:
    """Claim the run's lease as another worker would (a conditional write), with the
    concurrency slots its app's limits ask for (or ``slots``)."""
    run = app.runs.get(run_id)
    decision = machine.claim_lease(
        run,
        now=now or app.clock.now(),
        owner=owner,
        token=new_lease_token(),
        duration=app.config.lease_duration,
        slots=app.tasks.slots_for(run) if slots is None else slots,
    )
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)
