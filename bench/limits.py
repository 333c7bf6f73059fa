"""Concurrency limits: what a queue's ``concurrency_limit`` costs per run and what it does
to runs per second, against the same runs on a queue without a limit.

Three cases of the same ``runs`` runs (100; 20 with ``--smoke``), each on a fresh app
(its own table and queues) whose clients come from a counting session
(:mod:`bench.counting`), each worked by the sync worker with
:data:`WORKER_CONCURRENCY` threads in this process:

- ``unlimited``: queue ``billing`` defined without a limit;
- ``limit 8``: ``app.queue("billing", concurrency_limit=8)``, the worker's concurrency;
- ``limit 4``: half of it, so the limit binds.

The handler sleeps :data:`HANDLER_SECONDS` (10 ms), so attempts overlap and the limit
matters. A producer thread triggers in batches of ten while fewer than 40 runs
(``bench.producing.AHEAD``) are started but not finished
(:func:`bench.producing.produce`), so the queue stays shallow; the main thread drains
until every run was executed (as ``bench.workers`` does). The time is from the first
trigger until the drain returns after the last run's outcome is written; requests are
counted over the same phase, the triggers' included, after provisioning and the one-off
queue URL lookup. An unlimited and a limited case of :data:`WARMUP_RUNS` runs go first and
are not reported, so no case pays for a cold emulator.

Afterwards (not counted) each run's history is read: every ``waiting_for_slot`` event is
a claim that found the limit reached (the run then waits, no attempt counted) and every
``slot_freed`` one a wake by a freed slot. The most handlers running at once is checked
against the limit, and ``app.queues`` must show no slot held and no run waiting.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from bench.counting import Counts, RequestCounter
from bench.producing import DoneFile, produce
from bench.workers import mark_done
from runlane_sqs import EventType, Runlane, RunStatus, TaskContext

TASK = "bench.limited"
QUEUE = "billing"
WORKER_CONCURRENCY = 8
"""The throughput scenario's concurrency (``bench.throughput.RUNLANE_CONCURRENCY``)."""
LIMITS: tuple[int | None, ...] = (None, WORKER_CONCURRENCY, WORKER_CONCURRENCY // 2)
"""The cases: no limit, a limit equal to the worker's concurrency, and below it."""
HANDLER_SECONDS = 0.010
DEADLINE_SECONDS = 120.0
"""Longest one case may take (a run stuck waiting for a slot would otherwise hang)."""
WARMUP_RUNS = 20
"""Runs of an unlimited and a limited case first, not reported: the first case would
otherwise pay for a cold emulator (DynamoDB Local's JIT compiling its paths)."""
UNLIMITED = "unlimited"
Progress = Callable[[int], None]
AppFactory = Callable[[boto3.Session], Runlane]
"""Builds an unprovisioned app (fresh table and queue names) from a counting session."""


def case_name(limit: int | None) -> str:
    return UNLIMITED if limit is None else f"limit {limit}"


@dataclass
class LimitResult:
    """What ``runs`` runs of one case took and cost, in total (``per_run`` divides)."""

    case: str
    limit: int | None
    concurrency: int
    runs: int
    handler_seconds: float = HANDLER_SECONDS
    status: str = "ok"
    """``ok``, or why the figures are missing or wrong (``failed: ...``)."""
    seconds: float | None = None
    counts: Counts = field(default_factory=Counts)
    refused: Counter[str] = field(default_factory=Counter)
    """Of ``counts.requests``, those refused by their condition (:class:`Refusals`)."""
    waits: int = 0
    """``waiting_for_slot`` events: claims that found the limit reached."""
    runs_waited: int = 0
    """Runs with at least one ``waiting_for_slot`` event."""
    slot_freed: int = 0
    """``slot_freed`` events: waiting runs woken by a freed slot."""
    most_at_once: int = 0
    """The most handlers running at the same time."""

    @property
    def runs_per_second(self) -> float | None:
        return self.runs / self.seconds if self.seconds else None

    def per_run(self, value: float) -> float:
        return value / self.runs

    @property
    def capacity(self) -> str:
        """``complete``; ``lower bound`` when only refused requests reported no consumed
        capacity; ``incomplete`` when others did too (moto: every transaction)."""
        missing = self.counts.dynamodb_requests - self.counts.capacity_reported
        if missing <= 0:
            return "complete"
        return "lower bound" if missing <= sum(self.refused.values()) else "incomplete"

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "case": self.case,
            "limit": self.limit,
            "concurrency": self.concurrency,
            "runs": self.runs,
            "handler_ms": self.handler_seconds * 1000,
            "status": self.status,
            "seconds": self.seconds,
            "runs_per_second": self.runs_per_second,
            "requests": dict(sorted(c.requests.items())),
            "requests_per_run": {k: self.per_run(v) for k, v in sorted(c.requests.items())},
            "refused": dict(sorted(self.refused.items())),
            "refused_per_run": {k: self.per_run(v) for k, v in sorted(self.refused.items())},
            "per_run": {
                "dynamodb_requests": self.per_run(c.dynamodb_requests),
                "dynamodb_writes": self.per_run(c.dynamodb_writes),
                "dynamodb_reads": self.per_run(c.dynamodb_reads),
                "sqs_requests": self.per_run(c.sqs_requests),
                "write_units": self.per_run(c.write_units),
                "index_write_units": self.per_run(c.index_write_units),
                "read_units": self.per_run(c.read_units),
            },
            "capacity_complete": c.capacity_complete,
            "capacity": self.capacity,
            "waits": self.waits,
            "runs_waited": self.runs_waited,
            "slot_freed": self.slot_freed,
            "most_at_once": self.most_at_once,
        }


class Refusals:
    """DynamoDB requests refused by their condition, by operation (thread-safe): a claim
    that finds the limit reached is a cancelled transaction, a wake that another free
    (or the run's own recheck) got to first a failed conditional update. DynamoDB
    reports no consumed capacity for them, although it charges their write units."""

    REFUSED = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})

    def __init__(self, session: boto3.Session) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        session.events.register("after-call.dynamodb", self._after_call)

    def _after_call(self, parsed: Any, model: Any, **_: Any) -> None:
        error = parsed.get("Error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and error.get("Code") in self.REFUSED:
            with self._lock:
                self._counts[f"dynamodb.{model.name}"] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts = Counter()


class Handler:
    """Sleeps :data:`HANDLER_SECONDS`, keeps the most attempts running at once, then
    appends one byte to the done file the producer paces itself by."""

    def __init__(self, done: DoneFile, progress: Progress, seconds: float) -> None:
        self._done = str(done.path)
        self._progress = progress
        self._seconds = seconds
        self._lock = threading.Lock()
        self._running = 0
        self.most = 0
        self.finished = 0

    def __call__(self, ctx: TaskContext, payload: Any) -> None:
        with self._lock:
            self._running += 1
            self.most = max(self.most, self._running)
        try:
            if self._seconds:
                time.sleep(self._seconds)
        finally:
            with self._lock:
                self._running -= 1
                self.finished += 1
                finished = self.finished
        mark_done(self._done)
        self._progress(finished)


def measure_case(
    limit: int | None,
    make_app: AppFactory,
    runs: int,
    progress: Progress,
    *,
    concurrency: int = WORKER_CONCURRENCY,
    handler_seconds: float = HANDLER_SECONDS,
    deadline_seconds: float = DEADLINE_SECONDS,
) -> LimitResult:
    """One case: ``runs`` runs of a task on queue ``billing`` with ``limit`` (``None``:
    none), produced and worked in this process."""

    def define(app: Runlane, handler: Handler) -> None:
        app.task(handler, name=TASK, queue=app.queue(QUEUE, concurrency_limit=limit))

    result = LimitResult(case_name(limit), limit, concurrency, runs, handler_seconds)
    app, ids = produce_and_work(
        result, define, make_app, progress, deadline_seconds=deadline_seconds
    )
    read_histories(app, ids, result)
    return result


Define = Callable[[Runlane, "Handler"], None]
"""Registers task :data:`TASK` (on queue :data:`QUEUE`, with the case's limits) to call
the handler."""


def produce_and_work(
    result: LimitResult,
    define: Define,
    make_app: AppFactory,
    progress: Progress,
    *,
    deadline_seconds: float = DEADLINE_SECONDS,
) -> tuple[Runlane, list[str]]:
    """Produce ``result.runs`` runs of :data:`TASK` as ``define`` registers it and work
    them with a sync worker of ``result.concurrency`` threads in this process, counting
    requests and timing it into ``result``; the app and the runs' ids, to read back."""
    session = boto3.Session()
    counter = RequestCounter(session)
    refusals = Refusals(session)
    app = make_app(session)
    runs = result.runs
    with tempfile.TemporaryDirectory(prefix="runlane-bench-limits-") as tmp:
        done = DoneFile(Path(tmp))
        handler = Handler(done, progress, result.handler_seconds)
        define(app, handler)
        app.provision()
        app.transport.check_queue(QUEUE)  # the one-off GetQueueUrl, before counting
        worker = app.worker(concurrency=result.concurrency)
        ids: list[str] = []

        def trigger(count: int) -> None:
            ids.extend(run.id for run in app.trigger_many(TASK, [None] * count))

        stop = threading.Event()
        producer = threading.Thread(
            target=produce, args=(trigger, runs, done, stop), name="bench-producer", daemon=True
        )
        counter.reset()
        refusals.reset()
        started = time.perf_counter()
        deadline = time.monotonic() + deadline_seconds
        producer.start()
        executed = 0
        try:
            while executed < runs:
                if time.monotonic() > deadline:
                    result.status = (
                        f"failed: {executed} of {runs} runs executed in {deadline_seconds:.0f} s"
                    )
                    break
                executed += worker.drain(max_runs=runs - executed)
        finally:
            stop.set()
            producer.join(timeout=30)
        finished = time.perf_counter()
        result.counts = counter.snapshot()
        result.refused = refusals.snapshot()
    if result.status == "ok":
        result.seconds = finished - started
    result.most_at_once = handler.most
    return app, ids


def read_histories(app: Runlane, ids: list[str], result: LimitResult) -> None:
    """Slot events per run, every run's end, and the limit's state afterwards (not
    counted: the counter's snapshot is taken)."""
    problems: list[str] = []
    statuses: Counter[str] = Counter()
    attempts = 0
    for run_id in ids:
        run = app.runs.get(run_id)
        statuses[run.status.value] += 1
        events = app.runs.events(run_id)
        # a claim given back before its handler ran counts an attempt (docs/concepts.md)
        unrun = sum(
            1 for e in events if e.type is EventType.LEASE_EXPIRED and e.data.get("before_start")
        )
        attempts += run.attempt - unrun
        types = [event.type for event in events]
        waited = types.count(EventType.WAITING_FOR_SLOT)
        result.waits += waited
        result.runs_waited += 1 if waited else 0
        result.slot_freed += types.count(EventType.SLOT_FREED)
    if len(ids) != result.runs or statuses != {RunStatus.SUCCEEDED.value: result.runs}:
        problems.append(f"{len(ids)} runs triggered, ended {dict(statuses)}")
    if attempts != len(ids):
        problems.append(f"{attempts} attempts that entered a handler for {len(ids)} runs")
    if result.limit is not None and result.most_at_once > result.limit:
        problems.append(f"{result.most_at_once} handlers ran at once, limit {result.limit}")
    for occupancy in app.queues.list():
        if occupancy.holding or occupancy.waiting:
            problems.append(
                f"{occupancy.scope}: {occupancy.holding} slots held, {occupancy.waiting} "
                "runs waiting after every run ended"
            )
    if problems and result.status == "ok":
        result.status = "failed: " + "; ".join(problems)
    elif problems:
        result.status += "; " + "; ".join(problems)


def measure_limits(
    make_app: AppFactory,
    runs: int,
    progress: Callable[[str], Progress],
    *,
    warmup: int = WARMUP_RUNS,
) -> list[LimitResult]:
    """Every case in :data:`LIMITS`, on the same backend, after an unreported warm-up;
    ``progress(case)`` gives each one's progress callback."""
    for limit in (None, WORKER_CONCURRENCY):
        measure_case(limit, make_app, min(runs, warmup), lambda done: None)
    return [measure_case(limit, make_app, runs, progress(case_name(limit))) for limit in LIMITS]


def unlimited_ratio(
    rows: list[dict[str, Any]], row: dict[str, Any], figure: Callable[[dict[str, Any]], Any]
) -> float | None:
    """``row``'s figure over the unlimited case's (``None`` when either is missing)."""
    base = next((r for r in rows if r["case"] == UNLIMITED and r["status"] == "ok"), None)
    if base is None or row["status"] != "ok":
        return None
    ours, theirs = figure(row), figure(base)
    return ours / theirs if ours and theirs else None


def limits_json(results: Sequence[LimitResult]) -> list[dict[str, Any]]:
    """The rows as JSON, each with its figures over the unlimited case's."""
    rows = [r.to_json() for r in results]
    for row in rows:
        row["x_unlimited"] = {
            "runs_per_second": unlimited_ratio(rows, row, lambda r: r["runs_per_second"]),
            "dynamodb_requests": unlimited_ratio(
                rows, row, lambda r: r["per_run"]["dynamodb_requests"]
            ),
            "sqs_requests": unlimited_ratio(rows, row, lambda r: r["per_run"]["sqs_requests"]),
            "write_units": unlimited_ratio(
                rows,
                row,
                lambda r: r["per_run"]["write_units"] if r["capacity"] != "incomplete" else None,
            ),
        }
    return rows
