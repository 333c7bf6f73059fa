"""Large values: what a run costs and how soon it starts when its payload and result are
1 KB, 100 KB, 1 MB or 10 MB, on an app with a payload bucket (docs/payloads.md).

Each size gets a fresh app (its own table, queues and bucket) on a counting session
(bench/counting.py), provisioned before counting as in bench/cost.py. Then:

1. **The runs**: one ``app.trigger`` per run, each payload different (random hex), all
   drained by the sync worker as the cost scenarios are; the handler returns a result
   of the same size (the payload's text reversed). Counted: requests by operation,
   capacity units, S3 bytes put and got.
2. **Reading them back**: ``app.runs.get`` of each run, counted apart; it also checks
   every result.
3. **Trigger -> handler start**: an idle worker in a thread of the bench process, as
   bench/latency.py measures it, from before ``app.trigger`` (which writes the
   payload's object first) until the handler starts (after the worker read it).
   Not counted.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from bench.backends import Backend
from bench.cost import CostResult, drainer
from bench.counting import Counts, RequestCounter
from bench.latency import (
    CONCURRENCY,
    IDLE_WAIT_SECONDS,
    LatencySeries,
    Starts,
    time_trigger_to_start,
    wait_for_status,
)
from runlane_sqs import Runlane, RunStatus, TaskContext

TASK = "bench.values"
KB = 1_000
MB = 1_000 * KB


def size_label(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


def payload(size: int, n: int) -> dict[str, Any]:
    """A payload whose compact JSON is ``size`` bytes, its text random (so every run's
    value is its own object)."""
    overhead = len(json.dumps({"n": n, "blob": ""}, separators=(",", ":")))
    length = max(0, size - overhead)
    return {"n": n, "blob": os.urandom(length // 2 + 1).hex()[:length]}


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """The handler's result: as large as its payload, and another value."""
    return {"n": payload["n"], "blob": payload["blob"][::-1]}


@dataclass
class ValuesResult:
    """One size: its runs' counts, the counts of reading them back, its latency."""

    size: int
    runs: int
    counts: Counts
    read_counts: Counts
    latency: LatencySeries
    inline_limit: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        cost = CostResult(size_label(self.size), "", self.runs, self.counts).to_json()
        c, read = self.counts, self.read_counts
        per_op = {op: n / self.runs for op, n in sorted(c.requests.items())}
        read_per_op = {op: n / self.runs for op, n in sorted(read.requests.items())}
        return {
            "size": size_label(self.size),
            "size_bytes": self.size,
            "inline_limit": self.inline_limit,
            "runs": self.runs,
            "requests_per_run": per_op,
            "per_run": {
                **cost["per_run"],
                "s3_bytes_put": c.s3_bytes_put / self.runs,
                "s3_bytes_got": c.s3_bytes_got / self.runs,
            },
            "capacity_complete": c.capacity_complete,
            "usd_per_million_runs": cost["usd_per_million_runs"],
            "read_back_per_run": {
                "requests": read_per_op,
                "read_units": read.read_units / self.runs,
                "s3_bytes_got": read.s3_bytes_got / self.runs,
            },
            "trigger_to_start": self.latency.to_json(),
            "notes": self.notes,
        }


class Echo:
    """The handler: records when each attempt starts, returns :func:`echo`."""

    def __init__(self) -> None:
        self.starts = Starts()

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        self.starts.record(ctx.run_id, ctx.attempt)
        return echo(payload)


def build_app(backend: Backend, session: boto3.Session, handler: Echo) -> Runlane:
    table, prefix = backend.names()
    app = backend.app_for(table, prefix, session, payload_bucket=f"{table}-values")
    app.task(handler, name=TASK)
    app.provision()
    app.transport.check_queue("default")  # the one-off GetQueueUrl, before counting
    return app


def run_and_count(
    app: Runlane, counter: RequestCounter, size: int, runs: int
) -> tuple[Counts, Counts]:
    """Trigger and drain ``runs`` runs, then read each back: the counts of both."""
    counter.reset()
    payloads = {app.trigger(TASK, p).id: p for p in (payload(size, n) for n in range(runs))}
    drainer()(app)
    counts = counter.snapshot()
    counter.reset()
    for run_id, sent in payloads.items():
        run = app.runs.get(run_id)
        if run.status is not RunStatus.SUCCEEDED or run.result != echo(sent):
            raise RuntimeError(f"{size_label(size)}: run {run_id} ended {run.status.value}")
    return counts, counter.snapshot()


def trigger_to_start(app: Runlane, handler: Echo, size: int, samples: int) -> list[float]:
    """Seconds from before ``app.trigger`` to the handler's start, with an idle worker."""
    worker = app.worker(concurrency=CONCURRENCY, wait_seconds=IDLE_WAIT_SECONDS)
    thread = threading.Thread(target=worker.run, name="bench-values-worker", daemon=True)
    thread.start()
    seconds = []
    try:
        for n in range(samples):
            run_id, took = time_trigger_to_start(app, handler.starts, TASK, payload(size, n))
            seconds.append(took)
            wait_for_status(app, run_id, RunStatus.SUCCEEDED)  # the worker idle again
        return seconds
    finally:
        worker.stop()
        thread.join(timeout=IDLE_WAIT_SECONDS + 10)


def measure_size(backend: Backend, size: int, runs: int, samples: int) -> ValuesResult:
    session = boto3.Session()
    counter = RequestCounter(session)
    handler = Echo()
    app = build_app(backend, session, handler)
    counts, read_counts = run_and_count(app, counter, size, runs)
    seconds = trigger_to_start(app, handler, size, min(samples, runs))
    result = ValuesResult(
        size,
        runs,
        counts,
        read_counts,
        LatencySeries(f"trigger -> handler start, {size_label(size)}", seconds),
        app.config.inline_limit,
    )
    if not counts.capacity_complete:
        result.notes.append(
            f"{backend.name} reported consumed capacity for {counts.capacity_reported} of "
            f"{counts.dynamodb_requests} DynamoDB requests: units are a lower bound"
        )
    return result


def measure_values(
    backend: Backend, runs: dict[int, int], samples: int, progress: Callable[[int], None]
) -> list[ValuesResult]:
    """Every size in ``runs`` (bytes -> runs), smallest first."""
    results = []
    for done, (size, count) in enumerate(sorted(runs.items()), start=1):
        results.append(measure_size(backend, size, count, samples))
        progress(done)
    return results
