"""Maintenance scaling: what one ``app.maintenance.run_pass()`` reads with 1k, 10k and
100k runs in the table that need nothing (finished, or due only tomorrow) plus ten that
are due now.

Runs are seeded straight into the table with ``BatchWriteItem``, as the store would
write them (the project's own state machine and item codec), from a few threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from bench.backends import Backend
from bench.counting import Counts, RequestCounter
from runlane_sqs.adapters.dynamodb.items import AttributeMap
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, new_lease_token, new_run_id

TASK = "bench.maintenance"
DUE_RUNS = 10
IDLE_FRACTION = 0.2
"""Of the runs that need nothing, those queued for tomorrow (listed on the agenda index,
not yet due); the rest have succeeded (not listed at all)."""
BATCH_WRITE_ITEMS = 25
SEED_THREADS = 4
MOTO_SEED_LIMIT_SECONDS = 360.0
"""On moto, a size whose projected seeding time passes this is skipped, not faked."""
PAYLOAD = '{"order_id":7,"email":"ana@example.com"}'


@dataclass
class MaintenanceResult:
    table_runs: int
    status: str = "ok"
    seed_seconds: float | None = None
    pass_seconds: float | None = None
    published: int = 0
    counts: Counts = field(default_factory=Counts)

    @property
    def items_read_per_due(self) -> float | None:
        return self.counts.items_read / DUE_RUNS if self.status == "ok" else None

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "table_runs": self.table_runs,
            "due_runs": DUE_RUNS,
            "status": self.status,
            "seed_seconds": self.seed_seconds,
            "pass_seconds": self.pass_seconds,
            "published": self.published,
            "requests": dict(sorted(c.requests.items())),
            "items_read": c.items_read,
            "items_returned": c.items_returned,
            "items_read_per_due_run": self.items_read_per_due,
            "read_units": c.read_units,
            "write_units": c.write_units,
        }


def seed_run(now: datetime, *, task: str = TASK, **options: Any) -> tuple[Any, Any]:
    """A run of ``task`` triggered at ``now`` and its first event (``new_run``'s)."""
    return machine.new_run(
        run_id=new_run_id(),
        environment="bench",
        task=task,
        queue="default",
        payload={"order_id": 7, "email": "ana@example.com"},
        now=now,
        **options,
    )


def seed_claim(run: Run, at: datetime, lease: timedelta = timedelta(minutes=1)) -> Transition:
    """``run`` claimed at ``at`` by the seeding "worker", its lease good for ``lease``."""
    claim = machine.claim_lease(
        run, now=at, owner="bench-seed", token=new_lease_token(), duration=lease
    )
    assert isinstance(claim, Transition) and claim.after.lease is not None
    return claim


def succeeded_item(now: datetime, *, task: str = TASK) -> AttributeMap:
    """A run that was triggered, claimed and succeeded: on no agenda."""
    run, triggered = seed_run(now, task=task)
    claim = seed_claim(run, now)
    assert claim.after.lease is not None
    done = machine.record_success(
        claim.after, token=claim.after.lease.token, result={"sent": True}, now=now
    )
    return run_to_wire(done.after, [triggered, *claim.events, *done.events], PAYLOAD)


def idle_item(now: datetime) -> AttributeMap:
    """A run queued for tomorrow: on the agenda index, not due."""
    run, triggered = seed_run(now, due_at=now + timedelta(days=1))
    return run_to_wire(run, [triggered], PAYLOAD)


def due_item(now: datetime) -> AttributeMap:
    """A queued run due two minutes ago whose wakeup was never published."""
    run, triggered = seed_run(now - timedelta(minutes=2))
    return run_to_wire(run, [triggered], PAYLOAD)


def seed_items(table_runs: int, now: datetime) -> Iterable[AttributeMap]:
    idle = int(table_runs * IDLE_FRACTION)
    for n in range(table_runs):
        yield idle_item(now) if n < idle else succeeded_item(now)


def _write(client: Any, table: str, items: list[AttributeMap]) -> None:
    pending: list[dict[str, Any]] = [{"PutRequest": {"Item": item}} for item in items]
    while pending:
        response = client.batch_write_item(RequestItems={table: pending})
        pending = response.get("UnprocessedItems", {}).get(table, [])
        if pending:
            time.sleep(0.05)


def seed(
    backend: Backend, table: str, items: Iterable[AttributeMap], progress: Callable[[int], None]
) -> None:
    client = backend.client("dynamodb")
    batches: list[list[AttributeMap]] = []
    batch: list[AttributeMap] = []
    for item in items:
        batch.append(item)
        if len(batch) == BATCH_WRITE_ITEMS:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)

    def write(batch: list[AttributeMap]) -> int:
        _write(client, table, batch)
        return len(batch)

    written = 0
    with ThreadPoolExecutor(SEED_THREADS) as pool:
        for count in pool.map(write, batches):
            written += count
            progress(written)
    client.close()


def measure_size(
    backend: Backend, table_runs: int, progress: Callable[[int], None]
) -> MaintenanceResult:
    result = MaintenanceResult(table_runs)
    session = boto3.Session()
    counter = RequestCounter(session)
    table, prefix = backend.names()
    app = backend.app_for(table, prefix, session)
    app.task(lambda ctx, payload: None, name=TASK)
    app.provision()
    app.transport.check_queue("default")
    now = datetime.now(UTC)
    started = time.perf_counter()
    seed(backend, table, seed_items(table_runs, now), progress)
    seed(backend, table, (due_item(now) for _ in range(DUE_RUNS)), lambda _: None)
    result.seed_seconds = time.perf_counter() - started
    counter.reset()
    started = time.perf_counter()
    report = app.maintenance.run_pass()
    result.pass_seconds = time.perf_counter() - started
    result.counts = counter.snapshot()
    result.published = sum(job.published for job in report.jobs.values())
    if result.published != DUE_RUNS:
        result.status = f"failed: published {result.published} wakeups, not {DUE_RUNS}"
    return result


def measure_maintenance(
    backend: Backend, sizes: list[int], progress: Callable[[int], Callable[[int], None]]
) -> list[MaintenanceResult]:
    """Each size on a fresh table. On moto, a size whose seeding is projected (from the
    previous size's rate) to take over ``MOTO_SEED_LIMIT_SECONDS`` is skipped."""
    results: list[MaintenanceResult] = []
    rate: float | None = None
    for size in sizes:
        skipped = moto_skip(backend, size, rate)
        if skipped:
            results.append(MaintenanceResult(size, status=skipped))
            continue
        result = measure_size(backend, size, progress(size))
        if result.seed_seconds:
            rate = (size + DUE_RUNS) / result.seed_seconds
        results.append(result)
    return results


def moto_skip(backend: Backend, size: int, rate: float | None) -> str | None:
    """Why ``size`` runs are not seeded (``None``: they are): on moto, when seeding them
    at ``rate`` items/s (measured at the previous size) would take over
    ``MOTO_SEED_LIMIT_SECONDS``."""
    if backend.name != "moto" or rate is None or size / rate <= MOTO_SEED_LIMIT_SECONDS:
        return None
    return (
        f"skipped on moto: seeding projected at {size / rate:.0f} s "
        f"({rate:.0f} items/s measured at the previous size); run it on aws-local"
    )
