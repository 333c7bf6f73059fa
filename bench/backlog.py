"""Republish under a backlog: what maintenance sends while wakeups wait in line, with the
queue counts it takes before republishing (``counts on``) and without them
(``counts off``, the behaviour before them).

Each mode gets a fresh table and queue and ``runs`` runs (300; 20 with ``--smoke``)
triggered at once (``trigger_many``) onto queue ``default``, with
``republish_after`` = :data:`REPUBLISH_AFTER_SECONDS` and ``republish_max`` =
:data:`REPUBLISH_MAX_SECONDS`. Maintenance runs a pass every
:data:`PASS_INTERVAL_SECONDS` (back to back when a pass takes longer) in a thread, from
just before the trigger until every run has ended. Nobody consumes for
:data:`HOLD_FACTOR` times ``republish_after`` after the trigger returns, and at least
until :data:`HOLD_PASSES` passes that started once every run was due have finished (a
slow backend's passes take longer than that: moto's, about 10 s each at 300 runs).
Then a sync worker with :data:`WORKER_CONCURRENCY` threads in this process drains until
every run has been executed, and afterwards the duplicate wakeups left in the queue
(their receives and deletes are what duplicates cost the consumers). A counts-on mode of
:data:`WARMUP_RUNS` runs goes first and is not reported.

Maintenance has an app of its own on the same table and queues (as its own process
would), built on its own counting session. With counts off, that app is rewired
(``Runlane.rewire``) over :class:`WithoutBacklog`, a transport that delegates the five
methods of the wakeup transport port to the SQS transport and has no ``backlog()``: the
engine then gives maintenance no backlog probe, so it republishes as it did before.

Counted (:mod:`bench.counting`, after provisioning and the one-off queue URL lookups):
every request of the trigger, the worker and maintenance, and the wakeups SQS accepted
(``SendMessage``, and each successful entry of ``SendMessageBatch``). The pass reports
give the runs republished (``due_wakeups.published``) and held in line
(``due_wakeups.in_line``); the handler counts executions per run, which must be one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from statistics import fmean
from typing import Any

import boto3

from bench.backends import Backend
from bench.counting import Counts, RequestCounter
from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.reports import PassReport
from runlane_sqs.ports.transport import ReceivedWakeup, WakeupTransport

TASK = "bench.backlog"
QUEUE = "default"
REPUBLISH_AFTER_SECONDS = 2.0
REPUBLISH_MAX_SECONDS = 120.0
"""Above the longest counts-on mode seen (about 50 s on moto on a busy host): a held run
that reaches it is republished anyway, and the target is missed."""
HOLD_FACTOR = 3
"""Nobody consumes for this many times ``republish_after`` after the trigger."""
HOLD_PASSES = 2
"""... nor before this many passes started with every run due have finished."""
PASS_INTERVAL_SECONDS = 0.5
WORKER_CONCURRENCY = 8
DEADLINE_SECONDS = 300.0
"""Longest the consumers may take, after the hold, to execute every run."""
WARMUP_RUNS = 20
"""Runs of an unreported counts-on mode first, so the first mode reported does not pay
for a cold emulator (DynamoDB Local's JIT: its trigger took twice as long)."""
COUNTS_ON = "counts on"
COUNTS_OFF = "counts off"
MODES = (COUNTS_ON, COUNTS_OFF)
Progress = Callable[[int], None]


class WithoutBacklog:
    """The wakeup transport port, delegated, without ``backlog()``: maintenance given it
    cannot count queues and republishes every due run as before the counts."""

    def __init__(self, transport: WakeupTransport) -> None:
        self._transport = transport

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        return self._transport.publish(wakeups, delay)

    def check_queue(self, queue: str) -> None:
        self._transport.check_queue(queue)

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        return self._transport.receive(queue, max_messages, wait_seconds)

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._transport.ack(messages)

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._transport.release(messages)


class SentWakeups:
    """Messages SQS accepted from one session's clients: ``SendMessage`` and every
    successful ``SendMessageBatch`` entry (thread-safe)."""

    def __init__(self, session: boto3.Session) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        session.events.register("after-call.sqs.SendMessage", self._one)
        session.events.register("after-call.sqs.SendMessageBatch", self._batch)

    def _add(self, count: int) -> None:
        with self._lock:
            self.sent += count

    def _one(self, parsed: Any, **_: Any) -> None:
        self._add(1 if isinstance(parsed, dict) and parsed.get("MessageId") else 0)

    def _batch(self, parsed: Any, **_: Any) -> None:
        self._add(len(parsed.get("Successful") or []) if isinstance(parsed, dict) else 0)


class Executions:
    """The handler: counts executions per run and reports distinct runs executed."""

    def __init__(self, progress: Progress) -> None:
        self._lock = threading.Lock()
        self._progress = progress
        self.per_run: Counter[str] = Counter()

    def __call__(self, ctx: TaskContext, payload: Any) -> None:
        with self._lock:
            self.per_run[ctx.run_id] += 1
            distinct = len(self.per_run)
        self._progress(distinct)

    @property
    def distinct(self) -> int:
        with self._lock:
            return len(self.per_run)


class Passes:
    """Maintenance passes in a thread every :data:`PASS_INTERVAL_SECONDS` (start to
    start), summing what their ``due_wakeups`` jobs did."""

    def __init__(self, app: Runlane, interval: float) -> None:
        self._app = app
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-maintenance", daemon=True)
        self.started = time.monotonic()
        self.republished = 0
        self.in_line = 0
        self.begun: list[float] = []
        """When each finished pass (or failed one) began (monotonic)."""
        self.seconds: list[float] = []
        self.errors: list[str] = []
        self.timeline: list[dict[str, float | int]] = []
        """Passes that republished or held runs: when they began, seconds after the
        first, and what they did."""

    @property
    def count(self) -> int:
        return len(self.begun)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def finished_since(self, moment: float) -> int:
        """Passes that began at ``moment`` or later and have finished."""
        return sum(1 for begun in list(self.begun) if begun >= moment)

    def _loop(self) -> None:
        while not self._stop.is_set():
            begun = time.monotonic()
            try:
                self._record(self._app.maintenance.run_pass(), begun)
            except Exception as exc:  # recorded: the mode fails, the thread goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.seconds.append(time.monotonic() - begun)
            self.begun.append(begun)
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - begun)))

    def _record(self, report: PassReport, begun: float) -> None:
        due = report.due
        self.republished += due.published
        self.in_line += due.in_line
        if due.published or due.in_line:
            at = round(begun - self.started, 1)
            self.timeline.append({"at": at, "published": due.published, "in_line": due.in_line})


@dataclass
class BacklogResult:
    """One mode: what ``runs`` runs cost in total (``per_run`` divides)."""

    mode: str
    runs: int
    status: str = "ok"
    """``ok``, or why the figures are missing or wrong (``failed: ...``)."""
    seconds: float | None = None
    """From the first pass (just before the trigger) until every run had been executed."""
    trigger_seconds: float = 0.0
    """From the first pass until ``trigger_many`` returned (it writes every run, then
    publishes their wakeups)."""
    hold_seconds: float = 0.0
    """From the first pass until the consumers started."""
    passes: int = 0
    pass_seconds: list[float] = field(default_factory=list)
    republished: int = 0
    in_line: int = 0
    sent: int = 0
    """Wakeups SQS accepted, the trigger's included."""
    sent_by_maintenance: int = 0
    executed_more_than_once: int = 0
    left_in_queue: int = 0
    """Wakeups still in the queue when every run had ended (drained afterwards)."""
    counts: Counts = field(default_factory=Counts)
    """Every request: trigger, worker, maintenance, the leftovers' drain."""
    maintenance: Counts = field(default_factory=Counts)
    """Of ``counts``, maintenance's."""
    timeline: list[dict[str, float | int]] = field(default_factory=list)

    def per_run(self, value: float) -> float:
        return value / self.runs

    def to_json(self) -> dict[str, Any]:
        c, m = self.counts, self.maintenance
        return {
            "mode": self.mode,
            "runs": self.runs,
            "republish_after_s": REPUBLISH_AFTER_SECONDS,
            "republish_max_s": REPUBLISH_MAX_SECONDS,
            "trigger_s": self.trigger_seconds,
            "hold_s": self.hold_seconds,
            "pass_interval_s": PASS_INTERVAL_SECONDS,
            "concurrency": WORKER_CONCURRENCY,
            "status": self.status,
            "seconds": self.seconds,
            "passes": self.passes,
            "pass_seconds_mean": fmean(self.pass_seconds) if self.pass_seconds else None,
            "pass_seconds_max": max(self.pass_seconds, default=None),
            "republished": self.republished,
            "in_line": self.in_line,
            "sent": self.sent,
            "sent_by_maintenance": self.sent_by_maintenance,
            "executed_more_than_once": self.executed_more_than_once,
            "left_in_queue": self.left_in_queue,
            "per_run": {
                "wakeups_sent": self.per_run(self.sent),
                "republished": self.per_run(self.republished),
                "dynamodb_requests": self.per_run(c.dynamodb_requests),
                "sqs_requests": self.per_run(c.sqs_requests),
                "write_units": self.per_run(c.write_units),
                "read_units": self.per_run(c.read_units),
                "maintenance_write_units": self.per_run(m.write_units),
            },
            "capacity_complete": c.capacity_complete,
            "requests": dict(sorted(c.requests.items())),
            "requests_per_run": {k: self.per_run(v) for k, v in sorted(c.requests.items())},
            "maintenance_requests_per_run": {
                k: self.per_run(v) for k, v in sorted(m.requests.items())
            },
            "timeline": self.timeline,
        }


def _depth(backend: Backend, url: str) -> int:
    """Messages in the queue, visible, delayed or in flight (not counted)."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
    ]
    response = backend.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=names)
    return sum(int(v) for v in response.get("Attributes", {}).values())


def _apps(
    backend: Backend, mode: str, executions: Executions, sessions: tuple[boto3.Session, ...]
) -> tuple[Runlane, Runlane]:
    """The producer's and worker's app and maintenance's, on one table and queue, built
    on ``sessions`` (whose counters must be registered before the apps build clients)."""
    table, prefix = backend.names()
    settings = {
        "republish_after": REPUBLISH_AFTER_SECONDS,
        "republish_max": REPUBLISH_MAX_SECONDS,
    }
    app, keeper = (backend.app_for(table, prefix, s, **settings) for s in sessions)
    for each in (app, keeper):
        each.task(executions, name=TASK, queue=QUEUE)
    app.provision()
    for each in (app, keeper):
        each.transport.check_queue(QUEUE)  # the one-off GetQueueUrl, before counting
    if mode == COUNTS_OFF:
        keeper.rewire(
            store=keeper.store, transport=WithoutBacklog(keeper.transport), clock=keeper.clock
        )
    return app, keeper


def measure_mode(
    backend: Backend,
    mode: str,
    runs: int,
    progress: Progress,
    *,
    deadline_seconds: float = DEADLINE_SECONDS,
) -> BacklogResult:
    """One mode, on a fresh table and queue."""
    result = BacklogResult(mode, runs)
    executions = Executions(progress)
    sessions = boto3.Session(), boto3.Session()
    counter, keeper_counter = (RequestCounter(s) for s in sessions)
    sent, keeper_sent = (SentWakeups(s) for s in sessions)
    app, keeper = _apps(backend, mode, executions, sessions)
    worker = app.worker(concurrency=WORKER_CONCURRENCY)
    counter.reset()  # provisioning and the queue URL lookups sent no wakeup
    keeper_counter.reset()
    passes = Passes(keeper, PASS_INTERVAL_SECONDS)
    passes.start()
    try:
        ids = [run.id for run in app.trigger_many(TASK, [{"n": n} for n in range(runs)])]
        result.trigger_seconds = time.monotonic() - passes.started
        result.hold_seconds = _hold(passes, deadline_seconds) - passes.started
        deadline = time.monotonic() + deadline_seconds
        while executions.distinct < runs and time.monotonic() < deadline:
            worker.drain(max_runs=runs - executions.distinct)
        result.seconds = time.monotonic() - passes.started
    finally:
        passes.stop()
    if executions.distinct < runs:
        result.status = f"failed: {executions.distinct} of {runs} runs executed in time"
        result.seconds = None
    url = app.transport.queue_url(QUEUE)  # type: ignore[attr-defined]
    result.left_in_queue = _depth(backend, url)
    worker.drain()  # the duplicates left: their receives and deletes are counted
    maintenance = keeper_counter.snapshot()
    result.counts = counter.snapshot().plus(maintenance)
    result.maintenance = maintenance
    result.sent, result.sent_by_maintenance = sent.sent + keeper_sent.sent, keeper_sent.sent
    result.passes, result.pass_seconds = passes.count, passes.seconds
    result.republished, result.in_line = passes.republished, passes.in_line
    result.timeline = passes.timeline
    result.executed_more_than_once = sum(1 for n in executions.per_run.values() if n > 1)
    _check(app, ids, result, passes.errors)
    return result


def _hold(passes: Passes, deadline_seconds: float) -> float:
    """Wait, the runs just triggered, until consumers may start (see the module doc);
    returns when (monotonic)."""
    triggered = time.monotonic()
    due = triggered + REPUBLISH_AFTER_SECONDS
    until = triggered + HOLD_FACTOR * REPUBLISH_AFTER_SECONDS
    deadline = triggered + deadline_seconds
    while time.monotonic() < deadline and (
        time.monotonic() < until or passes.finished_since(due) < HOLD_PASSES
    ):
        time.sleep(0.05)
    return time.monotonic()


def _check(app: Runlane, ids: list[str], result: BacklogResult, errors: list[str]) -> None:
    """Every run succeeded after one attempt, executed once (read after counting)."""
    problems = [f"maintenance pass failed: {e}" for e in errors[:3]]
    statuses: Counter[str] = Counter()
    attempts = 0
    for run_id in ids:
        run = app.runs.get(run_id)
        statuses[run.status.value] += 1
        attempts += run.attempt
    if statuses != {RunStatus.SUCCEEDED.value: result.runs}:
        problems.append(f"runs ended {dict(statuses)}")
    if attempts != len(ids):
        problems.append(f"{attempts} attempts for {len(ids)} runs")
    if result.executed_more_than_once:
        problems.append(f"{result.executed_more_than_once} runs executed more than once")
    if problems:
        joined = "; ".join(problems)
        result.status = joined if result.status != "ok" else f"failed: {joined}"


def measure_backlog(
    backend: Backend, runs: int, progress: Callable[[str], Progress]
) -> list[BacklogResult]:
    """Both modes, counts on first, after an unreported warm-up; ``progress(mode)`` gives
    each one's callback."""
    measure_mode(backend, COUNTS_ON, min(runs, WARMUP_RUNS), lambda done: None)
    return [measure_mode(backend, mode, runs, progress(mode)) for mode in MODES]
