"""Fan-out: what ``ctx.map`` over N items costs on top of N plain runs, how often its
parent resumes, how long the join takes, how large the parent's item grows and how much
the worker's memory grows.

Two apps, each on a fresh table and queues whose clients come from a counting session
(:mod:`bench.counting`), the counters reset after provisioning and the one-off queue URL
lookup, both drained by the sync worker's ``drain()`` at concurrency 10 in this process,
as the ``cost`` scenario does:

- the **baseline**: ``plain`` runs of :mod:`bench.cost` (``trigger_many``, succeed at
  once), for a plain run's requests and capacity units per run;
- the **map**: one parent run whose handler calls ``ctx.map`` over N no-op children
  (``max_in_flight=100``, ``tolerate=0``) and returns their count. Everything the map
  sends is counted: the parent's two attempts, the group's opening transaction, every
  child, the join. The figures per child on top of a plain run are the map's totals
  less N + 1 plain runs (the children and the parent), divided by N; so the parent's
  own extra (its second attempt, the opening and the join) is spread over the children.

After counting, not counted: the parent's ``resumed`` events (the target is one); the
children's records (``BatchGetItem`` pages of 100), whose latest terminal write is the
last child's outcome, against the parent's ``resumed`` event and its second attempt's
``started`` event (stored timestamps, milliseconds, one host's clock); the parent's
item, read with the DynamoDB client and sized by DynamoDB's rules (:func:`item_bytes`),
beside one child's. The bench process's RSS is sampled every 20 ms during the map's
drain (:class:`bench.memory.PeakRss`, this process alone: the emulators are its
children): the worker runs in this process.

Then :data:`JOIN_CHILDREN`-child maps, one after the other on the same app, give more
samples of the join's latency (its p50), as the large map gives one. The first of them
is counted too: the slope between the two maps is what one more child costs, without the
parent's fixed share (``marginal_extra_per_child``: the slope less a plain run), and the
intercept is that share (``parent_extra_per_map``: the parent's second attempt, the
opening, the join, less its own plain run). The targets are held against the slope.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import boto3
import psutil  # type: ignore[import-untyped]

from bench.backends import Backend
from bench.cost import DRAIN_CONCURRENCY, SCENARIOS, CostResult, drainer, measure_scenario
from bench.counting import Counts, RequestCounter
from bench.limits import Refusals
from bench.memory import PeakRss
from runlane_sqs import EventType, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb.keys import run_key
from runlane_sqs.core.groups import child_run_id, group_id_for

PARENT_TASK = "bench.fanout"
CHILD_TASK = "bench.fanout_child"
MAX_IN_FLIGHT = 100
WAIT_NAME = "group:#1"
"""The parent's first ``ctx.map`` (``group_id_for(parent, WAIT_NAME)`` is its group)."""
JOIN_CHILDREN = 20
"""Children of each map that only times the join."""
CHILDREN_PAGE = 100
DEADLINE_SECONDS = 3600.0
"""Longest one map may take to drain (a join that never comes would otherwise hang)."""
CELERY_CHORD_POLLING = (
    "Celery's chord, for comparison (read from celery 5's code, not measured here): on a "
    "result backend without an atomic counter (database, S3, filesystem, ...) the join "
    "is a celery.chord_unlock task re-sent every result_chord_retry_interval (1 s by "
    "default) for as long as the chord runs, each one reading every header task's state "
    "from the backend; the Redis, memcached, DynamoDB and GCS backends instead count "
    "each header task with an increment after reading the group's record, and the last "
    "one reads every result to call the callback"
)
Progress = Callable[[int], None]


@dataclass
class FanoutResult:
    """One map of ``children`` children against ``baseline`` plain runs."""

    children: int
    baseline: CostResult
    status: str = "ok"
    """``ok``, or why the figures are missing or wrong (``failed: ...``)."""
    seconds: float | None = None
    """From the parent's trigger until the drain returned after its last attempt."""
    counts: Counts = field(default_factory=Counts)
    refused: Counter[str] = field(default_factory=Counter)
    """Of ``counts.requests``, those refused by their condition (bench.limits.Refusals)."""
    resumes: int = 0
    """The parent's ``resumed`` events."""
    join_ms: float | None = None
    """The last child's outcome until the parent's ``resumed`` event."""
    resume_start_ms: float | None = None
    """The last child's outcome until the parent's second attempt started."""
    join_samples_ms: list[float] = field(default_factory=list)
    """``join_ms`` of the small maps that only time the join."""
    parent_item_bytes: int | None = None
    child_item_bytes: int | None = None
    rss_before: int | None = None
    rss_peak: int | None = None
    small_children: int = 0
    """Children of the small map counted for the slope (0: none was)."""
    small_counts: Counts | None = None

    @property
    def capacity(self) -> str:
        """``complete``; ``lower bound`` when only refused requests reported no consumed
        capacity; ``incomplete`` when others did too (moto: every transaction)."""
        missing = self.counts.dynamodb_requests - self.counts.capacity_reported
        if missing <= 0:
            return "complete"
        return "lower bound" if missing <= sum(self.refused.values()) else "incomplete"

    def extra(self, value: float, per_plain_run: float) -> float:
        """Per child, the map's ``value`` less ``children + 1`` plain runs'."""
        return (value - per_plain_run * (self.children + 1)) / self.children

    def slope(self, capacity: bool) -> tuple[dict[str, float | None], dict[str, float | None]]:
        """What one more child adds over a plain run, and the parent's fixed extra per
        map, from the two maps counted (empty without the small one)."""
        small = self.small_counts
        if small is None or self.small_children == self.children:
            return {}, {}
        capacity = capacity and small.capacity_reported >= small.dynamodb_requests
        base = self.baseline.counts
        plain = totals(base, base.capacity_complete)
        big, little = totals(self.counts, capacity), totals(small, capacity)
        per_child: dict[str, float | None] = {}
        per_map: dict[str, float | None] = {}
        for key, value in big.items():
            other, each = little[key], plain[key]
            if value is None or other is None or each is None:
                per_child[key] = per_map[key] = None
                continue
            marginal = (value - other) / (self.children - self.small_children)
            per_child[key] = marginal - self.baseline.per_run(each)
            per_map[key] = value - self.children * marginal - self.baseline.per_run(each)
        return per_child, per_map

    def to_json(self) -> dict[str, Any]:
        c, base = self.counts, self.baseline.counts
        plain = self.baseline.per_run
        operations = sorted(set(c.requests) | set(base.requests))
        capacity_known = self.capacity != "incomplete" and self.baseline.counts.capacity_complete
        plain_totals = {
            key: None if value is None else plain(value)
            for key, value in totals(base, base.capacity_complete).items()
        }
        join = self.join_samples_ms or ([self.join_ms] if self.join_ms is not None else [])
        marginal, per_map = self.slope(capacity_known)
        return {
            "children": self.children,
            "max_in_flight": MAX_IN_FLIGHT,
            "concurrency": DRAIN_CONCURRENCY,
            "baseline_runs": self.baseline.runs,
            "status": self.status,
            "seconds": self.seconds,
            "requests": dict(sorted(c.requests.items())),
            "refused": dict(sorted(self.refused.items())),
            "requests_per_child": {op: c.requests[op] / self.children for op in operations},
            "plain_requests_per_run": {op: plain(base.requests[op]) for op in operations},
            "extra_requests_per_child": {
                op: self.extra(c.requests[op], plain(base.requests[op])) for op in operations
            },
            "write_units_per_child": {
                op: c.write_units_by_operation.get(op, 0.0) / self.children for op in operations
            }
            if capacity_known
            else None,
            "plain_write_units_per_run": {
                op: plain(base.write_units_by_operation.get(op, 0.0)) for op in operations
            },
            "extra_per_child": {
                key: None
                if value is None or (each := plain_totals[key]) is None
                else self.extra(value, each)
                for key, value in totals(c, capacity_known).items()
            },
            "plain_per_run": plain_totals,
            "small_children": self.small_children,
            "marginal_extra_per_child": marginal,
            "parent_extra_per_map": per_map,
            "capacity": self.capacity,
            "parent_resumes": self.resumes,
            "join_ms": self.join_ms,
            "resume_start_ms": self.resume_start_ms,
            "join_samples_ms": self.join_samples_ms,
            "join_p50_ms": statistics.median(join) if join else None,
            "join_max_ms": max(join) if join else None,
            "parent_item_bytes": self.parent_item_bytes,
            "child_item_bytes": self.child_item_bytes,
            "rss_before": self.rss_before,
            "rss_peak": self.rss_peak,
            "celery_chord": CELERY_CHORD_POLLING,
        }


def totals(counts: Counts, capacity: bool) -> dict[str, float | None]:
    """The figures compared per child (units ``None`` when not all were reported)."""
    return {
        "dynamodb_requests": counts.dynamodb_requests,
        "dynamodb_writes": counts.dynamodb_writes,
        "dynamodb_reads": counts.dynamodb_reads,
        "sqs_requests": counts.sqs_requests,
        "write_units": counts.write_units if capacity else None,
        "read_units": counts.read_units if capacity else None,
    }


class Children:
    """The child task: returns its item's number; counts the children done (for the
    progress bar)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._lock = threading.Lock()
        self.done = 0

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        with self._lock:
            self.done += 1
            done = self.done
        self._progress(done)
        return payload["n"]


def _parent(ctx: TaskContext, payload: Any) -> Any:
    items = [{"n": n} for n in range(payload["children"])]
    results = ctx.map(CHILD_TASK, items, max_in_flight=MAX_IN_FLIGHT, tolerate=0)
    return {"succeeded": results.succeeded, "failed": results.failed}


def build_app(backend: Backend, session: boto3.Session, children: Children) -> Runlane:
    app = backend.app(session)
    app.task(children, name=CHILD_TASK)
    app.task(_parent, name=PARENT_TASK)
    app.provision()
    app.transport.check_queue("default")  # the one-off GetQueueUrl, before counting
    return app


def run_map(app: Runlane, children: int, drain: Callable[[Runlane], int]) -> str:
    """Trigger a parent over ``children`` items and drain until it has finished."""
    parent = app.trigger(PARENT_TASK, {"children": children}).id
    deadline = time.monotonic() + DEADLINE_SECONDS
    while drain(app) and time.monotonic() < deadline:
        pass
    run = app.runs.get(parent)
    if run.status is not RunStatus.SUCCEEDED or run.result != {
        "succeeded": children,
        "failed": 0,
    }:
        raise RuntimeError(f"the parent ended {run.status.value} with {run.result!r}")
    return parent


def last_outcome(app: Runlane, parent: str) -> datetime:
    """When the last child's terminal write was made (its record's ``updated_at``)."""
    group = app.store.groups.get_group(group_id_for(parent, WAIT_NAME))
    if group is None:
        raise RuntimeError(f"parent {parent} has no group")
    latest: datetime | None = None
    for start in range(0, group.total, CHILDREN_PAGE):
        for child in app.store.groups.children(group, start, CHILDREN_PAGE):
            if child is None or not child.is_terminal:
                raise RuntimeError(f"group {group.id} has an unfinished child")
            latest = child.updated_at if latest is None else max(latest, child.updated_at)
    if latest is None:
        raise RuntimeError(f"group {group.id} has no children")
    return latest


def _ms(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000


def join_timing(app: Runlane, parent: str) -> tuple[int, float, float]:
    """The parent's ``resumed`` events, and the last child's outcome until the first of
    them and until the parent's second attempt started, in ms."""
    events = app.runs.events(parent)
    resumed = [e for e in events if e.type is EventType.RESUMED]
    second = next(e for e in events if e.type is EventType.STARTED and e.attempt == 2)
    last = last_outcome(app, parent)
    return len(resumed), _ms(last, resumed[0].at), _ms(last, second.at)


def _number_bytes(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


SCALAR_BYTES: dict[str, Callable[[Any], int]] = {
    "S": lambda inner: len(inner.encode()),
    "N": _number_bytes,
    "B": len,
    "BOOL": lambda inner: 1,
    "NULL": lambda inner: 1,
}


def value_bytes(value: dict[str, Any]) -> int:
    """One attribute value's size by DynamoDB's rules (numbers: about one byte per two
    significant digits, plus one; lists and maps: 3 bytes, plus 1 per element)."""
    kind, inner = next(iter(value.items()))
    if kind in SCALAR_BYTES:
        return SCALAR_BYTES[kind](inner)
    if kind in ("SS", "NS", "BS"):
        return sum(value_bytes({kind[0]: member}) for member in inner)
    if kind == "L":
        return 3 + sum(1 + value_bytes(member) for member in inner)
    return 3 + sum(1 + len(k.encode()) + value_bytes(v) for k, v in inner.items())


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: its attribute names and values."""
    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def stored_bytes(app: Runlane, backend: Backend, run_id: str) -> int:
    """The size of a run's item, read with the DynamoDB client."""
    response = backend.client("dynamodb").get_item(
        TableName=app.config.table,
        Key=run_key(app.config.environment, run_id),
        ConsistentRead=True,
    )
    return item_bytes(response["Item"])


def measure_map(
    backend: Backend,
    children: int,
    baseline_runs: int,
    progress: Progress,
    *,
    drain_wait_seconds: int | None = None,
) -> tuple[FanoutResult, Runlane, RequestCounter]:
    """The counted map, after its baseline; returns the app and its counter for the
    small maps."""
    plain = next(s for s in SCENARIOS if s.name == "plain")
    baseline = measure_scenario(
        plain,
        backend.app,
        baseline_runs,
        backend=backend.name,
        drain_wait_seconds=drain_wait_seconds,
    )
    session = boto3.Session()
    counter, refusals = RequestCounter(session), Refusals(session)
    app = build_app(backend, session, Children(progress))
    counter.reset()
    refusals.reset()
    result = FanoutResult(children, baseline)
    drain = drainer(drain_wait_seconds)
    result.rss_before = psutil.Process(os.getpid()).memory_info().rss
    with PeakRss(os.getpid(), children=False) as rss:
        started = time.perf_counter()
        parent = run_map(app, children, drain)
        result.seconds = time.perf_counter() - started
    result.counts, result.refused = counter.snapshot(), refusals.snapshot()
    result.rss_peak = rss.peak
    result.resumes, result.join_ms, result.resume_start_ms = join_timing(app, parent)
    result.parent_item_bytes = stored_bytes(app, backend, parent)
    first_child = child_run_id(group_id_for(parent, WAIT_NAME), 0)
    result.child_item_bytes = stored_bytes(app, backend, first_child)
    return result, app, counter


def measure_fanout(
    backend: Backend,
    children: int,
    baseline_runs: int,
    join_groups: int,
    progress: Progress,
    *,
    drain_wait_seconds: int | None = None,
) -> FanoutResult:
    """The counted map of ``children`` children after ``baseline_runs`` plain runs, then
    ``join_groups`` small maps that only time the join."""
    result, app, counter = measure_map(
        backend, children, baseline_runs, progress, drain_wait_seconds=drain_wait_seconds
    )
    drain = drainer(drain_wait_seconds)
    for n in range(join_groups):
        counter.reset()
        parent = run_map(app, JOIN_CHILDREN, drain)
        if n == 0:
            result.small_children, result.small_counts = JOIN_CHILDREN, counter.snapshot()
        _, join_ms, _ = join_timing(app, parent)
        result.join_samples_ms.append(join_ms)
    return result
