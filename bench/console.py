"""The web console: what each page load costs with 100 and with 100,000 runs in the
table (DynamoDB and SQS requests by operation, items read, read units, wall time).

The claim checked: the pages read through the indexes with bounded queries only, never
a Scan, so a page costs the same number of requests whatever the table holds.

Each size gets a fresh table. The app runs on a :class:`~runlane_sqs.ManualClock` set
when the size starts, so "the last hour" holds the seeded runs however long seeding
takes. Before seeding, one maintenance pass stores three schedules and the health
page's last pass, and every page is loaded once uncounted (clients built, queue URLs
looked up: a console process pays that once). Runs are then seeded straight into the
table with ``BatchWriteItem`` (bench/maintenance_scale.py's helpers) in a mix like a
working environment's; each page is then loaded ``loads`` times (fewer once a page has
taken ``LOAD_BUDGET_SECONDS``), each load counted on its own.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from starlette.testclient import TestClient

from bench.backends import Backend
from bench.counting import Counts, RequestCounter
from bench.maintenance_scale import (
    PAYLOAD,
    moto_skip,
    seed,
    seed_claim,
    seed_run,
    succeeded_item,
)
from runlane_sqs import ManualClock, Schedule
from runlane_sqs.adapters.dynamodb.items import AttributeMap
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.console.server import ConsoleSettings, console_app
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Failure, RunEvent, RunStatus, new_run_id
from runlane_sqs.core.retry import RetryDecision

TASK = "bench.console"
TOKEN = "bench-console"
BASE_URL = "http://127.0.0.1"
LOAD_BUDGET_SECONDS = 30.0
"""A page is loaded again only while its loads so far took less than this (moto reads
the whole table for every index query: one load of the runs page at 100,000 runs takes
minutes there)."""
MOTO_LOAD_LIMIT_SECONDS = 300.0
"""On moto, a size whose one load of every page is projected past this is skipped: moto
reads the whole table for every index query and serves one request at a time, so a load
grows with the table (at 100,000 runs the runs page took 11 minutes and answered 400:
its reads failed, most likely queued past botocore's 30 s read timeout)."""
RECENT = timedelta(hours=2)
RECENT_FRACTION = 0.75
"""Of the finished runs, those created in the last two hours; the rest are older."""
OLDEST = timedelta(days=7)
SHARE = {"failed": 0.05, "cancelled": 0.02, "queued": 0.01, "running": 0.01}
"""Of the runs seeded, by status (the rest succeeded); at least one of each."""
FAILURE = Failure(
    type="bench.PaymentDeclined",
    message="card declined",
    traceback='Traceback (most recent call last):\n  File "tasks.py", line 12, in charge\n'
    "bench.PaymentDeclined: card declined\n",
)
SCHEDULES = (
    Schedule.every("bench.console.hourly", 3600),
    Schedule.cron("bench.console.nightly", "0 3 * * *"),
    Schedule.cron("bench.console.weekly", "0 6 * * 1", tz="Europe/Paris"),
)
FETCHES = {"GetItem", "BatchGetItem", "TransactGetItems"}


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    """With ``{run_id}`` for the run page."""


PAGES = (
    Page("/runs", "/runs"),
    Page("/runs?status=failed", "/runs?status=failed"),
    Page("/runs/{id}", "/runs/{run_id}"),
    Page("/health", "/health"),
    Page("/schedules", "/schedules"),
)


class FetchCounter:
    """Items returned by GetItem, BatchGetItem and TransactGetItems (``RequestCounter``
    counts those of Query and Scan only)."""

    def __init__(self, session: boto3.Session) -> None:
        self._lock = threading.Lock()
        self.items = 0
        session.events.register("after-call.dynamodb", self._after_call)

    def _after_call(self, parsed: Any, model: Any, **_: Any) -> None:
        if model.name not in FETCHES or not isinstance(parsed, dict):
            return
        if model.name == "GetItem":
            found = 1 if parsed.get("Item") else 0
        elif model.name == "BatchGetItem":
            found = sum(len(items) for items in parsed.get("Responses", {}).values())
        else:
            found = sum(1 for r in parsed.get("Responses", []) if r.get("Item"))
        with self._lock:
            self.items += found

    def take(self) -> int:
        """The items counted since the last call."""
        with self._lock:
            items, self.items = self.items, 0
            return items


@dataclass
class PageCost:
    page: str
    status_code: int = 0
    ms: list[float] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    """The first counted load's."""
    fetched: int = 0
    """Items returned by GetItem and BatchGetItem in that load."""
    varied: bool = False
    """A later load sent other requests than the first."""

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "page": self.page,
            "status_code": self.status_code,
            "loads": len(self.ms),
            "ms": [round(ms, 1) for ms in self.ms],
            "ms_median": round(statistics.median(self.ms), 1) if self.ms else None,
            "requests": dict(sorted(c.requests.items())),
            "dynamodb_requests": c.dynamodb_requests,
            "sqs_requests": c.sqs_requests,
            "scans": c.requests.get("dynamodb.Scan", 0),
            "items_read": c.items_read + self.fetched,
            "items_returned": c.items_returned + self.fetched,
            "read_units": round(c.read_units, 1) if c.capacity_reported else None,
            "capacity_complete": c.capacity_complete,
            "requests_varied": self.varied,
        }


@dataclass
class ConsoleResult:
    table_runs: int
    status: str = "ok"
    seed_seconds: float | None = None
    mix: dict[str, int] = field(default_factory=dict)
    pages: list[PageCost] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "table_runs": self.table_runs,
            "status": self.status,
            "seed_seconds": self.seed_seconds,
            "mix": self.mix,
            "pages": [p.to_json() for p in self.pages],
        }


# seeding -------------------------------------------------------------------------------


def _failed(claim: Transition, at: datetime, retry_at: datetime | None) -> Transition:
    assert claim.after.lease is not None
    return machine.record_failure(
        claim.after,
        token=claim.after.lease.token,
        failure=FAILURE,
        decision=RetryDecision(retry_at=retry_at),
        now=at,
    )


def failed_run(at: datetime) -> tuple[str, AttributeMap]:
    """A run whose two attempts failed (the second 30 s after the first): its id, item."""
    run, triggered = seed_run(at, task=TASK)
    first = seed_claim(run, at)
    retried = _failed(first, at + timedelta(seconds=1), at + timedelta(seconds=30))
    second = seed_claim(retried.after, at + timedelta(seconds=30))
    failed = _failed(second, at + timedelta(seconds=31), None)
    assert failed.after.status is RunStatus.FAILED
    events: list[RunEvent] = [triggered]
    for step in (first, retried, second, failed):
        events.extend(step.events)
    return run.id, run_to_wire(failed.after, events, PAYLOAD)


def cancelled_item(at: datetime) -> AttributeMap:
    """A queued run an operator cancelled five seconds later."""
    run, triggered = seed_run(at, task=TASK, due_at=at + timedelta(minutes=10))
    done = machine.request_cancel(
        run, now=at + timedelta(seconds=5), actor="console:ana", reason="duplicate order"
    )
    return run_to_wire(done.after, [triggered, *done.events], PAYLOAD)


def queued_item(at: datetime) -> AttributeMap:
    """A run waiting for a worker since ``at``."""
    run, triggered = seed_run(at, task=TASK)
    return run_to_wire(run, [triggered], PAYLOAD)


def running_item(at: datetime) -> AttributeMap:
    """A run a worker claimed a second after ``at``, its lease good for 15 minutes."""
    run, triggered = seed_run(at, task=TASK)
    claim = seed_claim(run, at + timedelta(seconds=1), lease=timedelta(minutes=15))
    return run_to_wire(claim.after, [triggered, *claim.events], PAYLOAD)


def seed_mix(table_runs: int) -> dict[str, int]:
    """Runs seeded by status: at least one of each in :data:`SHARE`, the rest
    succeeded."""
    mix = {status: max(1, round(table_runs * share)) for status, share in SHARE.items()}
    mix["succeeded"] = table_runs - sum(mix.values())
    if mix["succeeded"] < 0:
        raise ValueError(f"{table_runs} runs are too few for the mix")
    return mix


class Seeder:
    """The items of one size's runs, creation times drawn from a seeded generator: the
    finished runs over the last two hours (three in four) and the week before, the
    unfinished ones in the last five minutes; the newest failed run is kept for the run
    page."""

    def __init__(self, now: datetime, mix: dict[str, int]) -> None:
        self.now = now
        self.mix = mix
        self.random = random.Random(sum(mix.values()))
        self.shown_run = ""

    def _finished_at(self) -> datetime:
        if self.random.random() < RECENT_FRACTION:
            ago = self.random.uniform(60, RECENT.total_seconds())
        else:
            ago = self.random.uniform(RECENT.total_seconds(), OLDEST.total_seconds())
        return self.now - timedelta(seconds=ago)

    def _recent(self) -> datetime:
        return self.now - timedelta(seconds=self.random.uniform(10, 300))

    def items(self) -> Iterator[AttributeMap]:
        self.shown_run, item = failed_run(self.now - timedelta(minutes=2))
        yield item
        for _ in range(self.mix["failed"] - 1):
            yield failed_run(self._finished_at())[1]
        for _ in range(self.mix["cancelled"]):
            yield cancelled_item(self._finished_at())
        for _ in range(self.mix["queued"]):
            yield queued_item(self._recent())
        for _ in range(self.mix["running"]):
            yield running_item(self._recent())
        for _ in range(self.mix["succeeded"]):
            yield succeeded_item(self._finished_at(), task=TASK)


# page loads ----------------------------------------------------------------------------


def sign_in(client: TestClient) -> None:
    """Trade the token for the console's cookie (a 303 to the page without it)."""
    response = client.get(f"/runs?token={TOKEN}", follow_redirects=False)
    if response.status_code != 303 or not client.cookies:
        raise RuntimeError(f"the console did not set its cookie: {response.status_code}")


def load_page(
    client: TestClient,
    path: str,
    loads: int,
    counters: tuple[RequestCounter, FetchCounter],
    name: str,
) -> PageCost:
    """Up to ``loads`` loads of ``path``, each counted on its own; the first load's
    counts are kept."""
    counter, fetches = counters
    cost = PageCost(name)
    while len(cost.ms) < loads and sum(cost.ms) < LOAD_BUDGET_SECONDS * 1000:
        counter.reset()
        fetches.take()
        started = time.perf_counter()
        response = client.get(path)
        cost.ms.append((time.perf_counter() - started) * 1000)
        counts, fetched = counter.snapshot(), fetches.take()
        if len(cost.ms) == 1:
            cost.status_code, cost.counts, cost.fetched = response.status_code, counts, fetched
        elif counts.requests != cost.counts.requests:
            cost.varied = True
    return cost


def measure_size(
    backend: Backend, table_runs: int, loads: int, progress: Callable[[int], None]
) -> ConsoleResult:
    result = ConsoleResult(table_runs, mix=seed_mix(table_runs))
    session = boto3.Session()
    counters = (RequestCounter(session), FetchCounter(session))
    table, prefix = backend.names()
    now = datetime.now(UTC).replace(microsecond=0)
    app = backend.app_for(table, prefix, session, clock=ManualClock(now))
    app.task(lambda ctx, payload: None, name=TASK, schedules=list(SCHEDULES))
    app.provision()
    app.transport.check_queue("default")
    app.maintenance.run_pass()
    asgi = console_app(app, ConsoleSettings(token=TOKEN))
    with TestClient(asgi, base_url=BASE_URL) as client:
        sign_in(client)
        for page in PAGES:  # warm: clients built, queue URLs looked up (the run: a 404)
            client.get(page.path.format(run_id=new_run_id()))
        seeder = Seeder(now, result.mix)
        started = time.perf_counter()
        seed(backend, table, seeder.items(), progress)
        result.seed_seconds = time.perf_counter() - started
        for page in PAGES:
            path = page.path.format(run_id=seeder.shown_run)
            result.pages.append(load_page(client, path, loads, counters, page.name))
    refused = [f"{p.page} answered {p.status_code}" for p in result.pages if p.status_code != 200]
    if refused:
        result.status = f"failed: {', '.join(refused)}"
    return result


def measure_console(
    backend: Backend,
    sizes: list[int],
    loads: int,
    progress: Callable[[int], Callable[[int], None]],
) -> list[ConsoleResult]:
    """Each size on a fresh table. On moto, a size is skipped whose seeding is projected
    (from the previous size's rate) to take over ``MOTO_SEED_LIMIT_SECONDS``, or whose
    page loads over ``MOTO_LOAD_LIMIT_SECONDS``."""
    results: list[ConsoleResult] = []
    rate: float | None = None
    load_seconds_per_run: float | None = None
    for size in sizes:
        skipped = moto_skip(backend, size, rate) or moto_load_skip(
            backend, size, load_seconds_per_run
        )
        if skipped:
            results.append(ConsoleResult(size, status=skipped, mix=seed_mix(size)))
            continue
        result = measure_size(backend, size, loads, progress(size))
        if result.seed_seconds:
            rate = size / result.seed_seconds
        load_seconds_per_run = sum(p.ms[0] for p in result.pages if p.ms) / 1000 / size
        results.append(result)
    return results


def moto_load_skip(backend: Backend, size: int, seconds_per_run: float | None) -> str | None:
    """Why ``size`` is skipped on moto (``None``: it is not): one load of every page,
    projected in proportion to the table from the previous size's, would take over
    ``MOTO_LOAD_LIMIT_SECONDS``."""
    if backend.name != "moto" or seconds_per_run is None:
        return None
    projected = seconds_per_run * size
    if projected <= MOTO_LOAD_LIMIT_SECONDS:
        return None
    return (
        f"skipped on moto: one load of each page projected at {projected:.0f} s (moto "
        "reads the whole table for each index query); run it on aws-local"
    )
