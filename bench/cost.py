"""Cost per run: AWS requests by operation, DynamoDB capacity units and dollars per
million runs, for a plain run, one retry, one release and one token wait.

Each scenario gets a fresh app (its own table and queues) whose clients come from a
counting session; the counter is reset after provisioning and the one-off queue URL
lookup, so only the runs' own requests are counted. Runs are drained by the sync worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import boto3

from bench.counting import Counts, RequestCounter
from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext

# Published on-demand prices, us-east-1, read 2026-11-30 from
# https://aws.amazon.com/dynamodb/pricing/on-demand/ (after the November 2024 price cut)
# and https://aws.amazon.com/sqs/pricing/ (standard queues, after the first million free
# requests a month; every 64 KB chunk of a request's payload is billed as one request).
DYNAMODB_WRITE_USD_PER_MILLION_UNITS = 0.625
DYNAMODB_READ_USD_PER_MILLION_UNITS = 0.125
SQS_STANDARD_USD_PER_MILLION_REQUESTS = 0.40
# S3 Standard requests, us-east-1, as https://aws.amazon.com/s3/pricing/ lists them
# ("Requests & data retrievals", 2026-12-04): $0.005 per 1,000 PUT, COPY, POST or LIST
# requests, $0.0004 per 1,000 GET and other requests; DELETE is free. Storage (per
# GB-month while an object is kept) and transfer out of the region are left out: data
# sent into S3 and between S3 and compute in its region is free.
S3_PUT_USD_PER_MILLION_REQUESTS = 5.00
S3_GET_USD_PER_MILLION_REQUESTS = 0.40

TASK = "bench.cost"
DRAIN_CONCURRENCY = 10
Drain = Callable[[Runlane], int]
AppFactory = Callable[[boto3.Session], Runlane]
"""Builds an unprovisioned app (fresh table and queue names) from a counting session."""


@dataclass
class CostResult:
    """What ``runs`` runs of one scenario cost, in total (``per_run`` divides)."""

    scenario: str
    description: str
    runs: int
    counts: Counts
    notes: list[str] = field(default_factory=list)

    def per_run(self, value: float) -> float:
        return value / self.runs

    @property
    def usd_per_million_runs(self) -> float:
        c = self.counts
        s3 = c.service("s3")
        return self.per_run(
            c.write_units * DYNAMODB_WRITE_USD_PER_MILLION_UNITS
            + c.read_units * DYNAMODB_READ_USD_PER_MILLION_UNITS
            + c.sqs_requests * SQS_STANDARD_USD_PER_MILLION_REQUESTS
            + s3["PutObject"] * S3_PUT_USD_PER_MILLION_REQUESTS
            + s3["GetObject"] * S3_GET_USD_PER_MILLION_REQUESTS
        )

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "scenario": self.scenario,
            "description": self.description,
            "runs": self.runs,
            "requests": dict(sorted(c.requests.items())),
            "per_run": {
                "dynamodb_writes": self.per_run(c.dynamodb_writes),
                "dynamodb_reads": self.per_run(c.dynamodb_reads),
                "sqs_requests": self.per_run(c.sqs_requests),
                "s3_requests": self.per_run(c.s3_requests),
                "write_units": self.per_run(c.write_units),
                "index_write_units": self.per_run(c.index_write_units),
                "read_units": self.per_run(c.read_units),
            },
            "capacity_complete": c.capacity_complete,
            "usd_per_million_runs": self.usd_per_million_runs,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    handler: Callable[[TaskContext, Any], Any]
    drive: Callable[[Runlane, int, Drain], list[str]]
    """Triggers ``runs`` runs, drains them to the end and returns their ids."""
    retry: RetryPolicy | None = None


def drainer(wait_seconds: int | None = None) -> Drain:
    """The sync worker's ``drain()``; ``wait_seconds`` replaces its closing long poll
    (1 s by default). The unit test uses 0 to stay fast: that changes only how long
    the last, empty receive waits."""

    def drain(app: Runlane) -> int:
        worker = app.worker(concurrency=DRAIN_CONCURRENCY)
        if wait_seconds is not None:
            worker.config = replace(worker.config, drain_wait_seconds=wait_seconds)
        return worker.drain()

    return drain


def _noop(ctx: TaskContext, payload: Any) -> None:
    return None


def _fail_once(ctx: TaskContext, payload: Any) -> None:
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")


def _release_once(ctx: TaskContext, payload: Any) -> None:
    if ctx.attempt == 1:
        ctx.release(delay=0)


def _wait_for_token(ctx: TaskContext, payload: Any) -> Any:
    return ctx.wait_for_token(payload["token"]).value


def _trigger_many(app: Runlane, runs: int, drain: Drain) -> list[str]:
    ids = [run.id for run in app.trigger_many(TASK, [{"n": n} for n in range(runs)])]
    drain(app)
    return ids


def _trigger_many_tagged(app: Runlane, runs: int, drain: Drain) -> list[str]:
    """As ``plain``, each ten runs with two tags (a customer and a region): what tags add
    is ``tagged`` less ``plain`` (docs/tags.md, "Costs")."""
    ids: list[str] = []
    for start in range(0, runs, 10):
        tags = {"customer": f"c{start // 10}", "region": "eu"}
        made = app.trigger_many(
            TASK, [{"n": n} for n in range(start, min(start + 10, runs))], tags=tags
        )
        ids += [run.id for run in made]
    drain(app)
    return ids


def _trigger_each(app: Runlane, runs: int, drain: Drain) -> list[str]:
    ids = [app.trigger(TASK, {"n": n}).id for n in range(runs)]
    drain(app)
    return ids


def _token_wait(app: Runlane, runs: int, drain: Drain) -> list[str]:
    tokens = [app.tokens.create() for _ in range(runs)]
    ids = [app.trigger(TASK, {"token": t.id}).id for t in tokens]
    drain(app)  # every first attempt releases, waiting for its token
    for token in tokens:
        app.tokens.complete(token.id, {"approved": True})
    drain(app)  # the completions published the wakeups: second attempts succeed
    return ids


IMMEDIATE_RETRY = RetryPolicy(max_attempts=2, backoff="fixed", delay=0, max_delay=0)
SCENARIOS = (
    Scenario("plain", "trigger_many (batched sends), succeed at once", _noop, _trigger_many),
    Scenario("plain_single", "one trigger per run, succeed at once", _noop, _trigger_each),
    Scenario(
        "tagged",
        "as plain, with two tags a run (two tag-index entries at the trigger)",
        _noop,
        _trigger_many_tagged,
    ),
    Scenario(
        "retry",
        "fail once, retry with zero backoff, succeed",
        _fail_once,
        _trigger_each,
        IMMEDIATE_RETRY,
    ),
    Scenario("release", "ctx.release(delay=0) once, then succeed", _release_once, _trigger_each),
    Scenario(
        "token_wait",
        "tokens.create + trigger; wait_for_token; tokens.complete; resume and succeed",
        _wait_for_token,
        _token_wait,
    ),
)


def measure_scenario(
    scenario: Scenario,
    make_app: AppFactory,
    runs: int,
    *,
    backend: str,
    drain_wait_seconds: int | None = None,
) -> CostResult:
    session = boto3.Session()
    counter = RequestCounter(session)
    app = make_app(session)
    app.task(scenario.handler, name=TASK, retry=scenario.retry)
    app.provision()
    app.transport.check_queue("default")  # the one-off GetQueueUrl, before counting
    counter.reset()
    ids = scenario.drive(app, runs, drainer(drain_wait_seconds))
    counts = counter.snapshot()
    statuses = {app.runs.get(run_id).status for run_id in ids}
    if statuses != {RunStatus.SUCCEEDED}:
        raise RuntimeError(f"{scenario.name}: runs ended {sorted(s.value for s in statuses)}")
    result = CostResult(scenario.name, scenario.description, runs, counts)
    if not counts.capacity_complete:
        result.notes.append(
            f"{backend} reported consumed capacity for {counts.capacity_reported} of "
            f"{counts.dynamodb_requests} DynamoDB requests: units are a lower bound"
        )
    return result


def measure_costs(make_app: AppFactory, runs: int, *, backend: str) -> list[CostResult]:
    """Every scenario, ``runs`` runs each, drained by the sync worker as configured by
    default."""
    return [measure_scenario(s, make_app, runs, backend=backend) for s in SCENARIOS]
