"""What the simulated fleet runs: the tasks every process registers, the runs the
producers trigger, and the ledger the handlers write as they are entered.

Each task's outcome is decided by its payload alone (how long it works, how many
attempts fail), so the invariants know the right answer for every run. The ledger is
the simulation's own record, outside storage: who entered which handler when (by the
clock of the process that ran it), which step functions ran, which runs the producers
were given.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import greenlet

from runlane_sqs import RateLimit, RetryPolicy, Runlane
from runlane_sqs.engine.context import TaskContext
from simulation.world import EPOCH, World

PLAIN = "sim.plain"
FLAKY = "sim.flaky"
FAILING = "sim.failing"
STEPS = "sim.steps"
LIMITED = "sim.limited"
RATED = "sim.rated"
RELEASED = "sim.released"
LIMITED_QUEUE = "limited"
CONCURRENCY_LIMIT = 2
RATE = RateLimit(5, per=1)
FLAKY_ATTEMPTS = 4
FAILING_ATTEMPTS = 2
TASKS = (PLAIN, FLAKY, FAILING, STEPS, LIMITED, RATED, RELEASED)
QUEUES = ("default", LIMITED_QUEUE)


def epoch_us(at: datetime) -> int:
    """A timezone-aware datetime in µs since the Unix epoch."""
    return (at - UNIX_EPOCH) // timedelta(microseconds=1)


UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_US = epoch_us(EPOCH)


@dataclass
class Entry:
    """One handler entered: which attempt of which run, where and when."""

    run_id: str
    task: str
    attempt: int
    process: str
    at_us: int
    """When, in µs since the Unix epoch, by the clock of the process that entered it (its
    skew included)."""
    lease_expires_us: int
    """When the attempt's lease expires, as last renewed (by the claimer's clock)."""
    token: str = ""
    """The attempt's lease token."""
    finished: bool = False
    """The handler returned (or raised)."""
    outcome_written: bool = False
    """The attempt's outcome landed: what its greenlet writes after is the path's own
    bookkeeping, not the attempt's."""


@dataclass
class Ledger:
    """What the handlers did, written as they ran."""

    entries: list[Entry] = field(default_factory=list)
    open: dict[tuple[str, int], Entry] = field(default_factory=dict)
    step_calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    over_limit: list[str] = field(default_factory=list)
    """Handler entries that found more leases of their limited queue live than its limit."""
    unfenced: list[str] = field(default_factory=list)
    """Writes an attempt made to its run that landed while another lease (or none) held it."""
    by_greenlet: dict[greenlet.greenlet, Entry] = field(default_factory=dict)
    """The attempt whose handler each greenlet entered last (its writes are that
    attempt's from then on)."""

    def entered(
        self, world: World, ctx: TaskContext, task: str, lease_us: int, token: str
    ) -> Entry:
        process = world.current
        assert process is not None, "a handler runs on a process's greenlet"
        entry = Entry(
            ctx.run_id,
            task,
            ctx.attempt,
            process.name,
            EPOCH_US + world.now_us + process.skew_us,
            lease_us,
            token,
        )
        self.entries.append(entry)
        self.by_greenlet[greenlet.getcurrent()] = entry
        self.open[(ctx.run_id, ctx.attempt)] = entry
        return entry

    def left(self, ctx: TaskContext) -> None:
        entry = self.open.pop((ctx.run_id, ctx.attempt), None)
        if entry is not None:
            entry.finished = True

    def renewed(self, run_id: str, attempt: int, expires_us: int) -> None:
        entry = self.open.get((run_id, attempt))
        if entry is not None:
            entry.lease_expires_us = expires_us


class Handlers:
    """The workload's handlers, each noting its entry in the ledger (by the clock of the
    process that runs it) and doing what its payload says."""

    def __init__(self, world: World, ledger: Ledger, skew_margin_us: int) -> None:
        self.world = world
        self.ledger = ledger
        self.skew_margin_us = skew_margin_us
        """Leases are compared across processes' clocks: give or take their skews."""

    def enter(self, ctx: TaskContext, task: str) -> Entry:
        """Note the handler's entry, with its attempt's lease as the claim left it."""
        lease = ctx.services.run().lease if ctx.services is not None else None
        expires = epoch_us(lease.expires_at) if lease is not None else 0
        token = lease.token if lease is not None else ""
        return self.ledger.entered(self.world, ctx, task, expires, token)

    @staticmethod
    def work(payload: dict[str, Any]) -> None:
        seconds = float(payload.get("work", 0))
        if seconds:
            time.sleep(seconds)  # virtual time: other processes run meanwhile

    def plain(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        self.enter(ctx, PLAIN)
        self.work(payload)
        self.ledger.left(ctx)
        return {"n": payload["n"], "double": 2 * payload["n"]}

    def flaky(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        self.enter(ctx, FLAKY)
        self.work(payload)
        self.ledger.left(ctx)
        if ctx.attempt <= payload["fails"]:
            raise RuntimeError(f"attempt {ctx.attempt} fails by design")
        return {"n": payload["n"], "attempt": ctx.attempt}

    def failing(self, ctx: TaskContext, payload: dict[str, Any]) -> None:
        self.enter(ctx, FAILING)
        self.ledger.left(ctx)
        raise ValueError("fails every time, by design")

    def steps(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        self.enter(ctx, STEPS)
        n = payload["n"]
        first = ctx.step("first", lambda: self.stepped(ctx, "first", n + 1))
        self.work(payload)
        second = ctx.step("second", lambda: self.stepped(ctx, "second", n + 2))
        self.ledger.left(ctx)
        return {"first": first, "second": second}

    def stepped(self, ctx: TaskContext, name: str, value: int) -> int:
        self.ledger.step_calls[(ctx.run_id, name)] += 1
        return value

    def limited(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        entry = self.enter(ctx, LIMITED)
        live = [
            e
            for e in self.ledger.entries
            if e.task == LIMITED
            and not e.finished
            and e is not entry
            and e.lease_expires_us > entry.at_us + self.skew_margin_us
        ]
        if len(live) >= CONCURRENCY_LIMIT:
            holders = ", ".join(f"{e.run_id}#{e.attempt}@{e.process}" for e in live)
            self.ledger.over_limit.append(
                f"{ctx.run_id}#{ctx.attempt} entered on {entry.process} while {holders} "
                f"held live leases (limit {CONCURRENCY_LIMIT})"
            )
        self.work(payload)
        self.ledger.left(ctx)
        return {"n": payload["n"]}

    def rated(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        self.enter(ctx, RATED)
        self.ledger.left(ctx)
        return {"n": payload["n"]}

    def released(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        self.enter(ctx, RELEASED)
        self.ledger.left(ctx)
        if ctx.attempt == 1:
            ctx.release(delay=float(payload.get("pause", 2)))
        return {"n": payload["n"], "attempt": ctx.attempt}


def register(app: Runlane, handlers: Handlers) -> None:
    """Register the workload's tasks on ``app`` (each process registers them, as each
    process of a deployment imports the same app module)."""
    limited = app.queue(LIMITED_QUEUE, concurrency_limit=CONCURRENCY_LIMIT)
    app.task(handlers.plain, name=PLAIN)
    app.task(
        handlers.flaky,
        name=FLAKY,
        retry=RetryPolicy(max_attempts=FLAKY_ATTEMPTS, delay=0.5, jitter=0),
    )
    app.task(
        handlers.failing,
        name=FAILING,
        retry=RetryPolicy(max_attempts=FAILING_ATTEMPTS, delay=0.5, jitter=0),
    )
    app.task(handlers.steps, name=STEPS)
    app.task(handlers.limited, name=LIMITED, queue=limited)
    app.task(handlers.rated, name=RATED, rate_limits=[RATE])
    app.task(handlers.released, name=RELEASED)


@dataclass(frozen=True)
class Planned:
    """One trigger a producer makes: when, of what, with which key."""

    at_us: int
    task: str
    payload: dict[str, Any]
    idempotency_key: str | None = None


def expected_result(task: str, payload: dict[str, Any]) -> Any:
    """What a run of ``task`` with ``payload`` returns when it succeeds."""
    n = payload["n"]
    if task == PLAIN:
        return {"n": n, "double": 2 * n}
    if task == FLAKY:
        return {"n": n, "attempt": payload["fails"] + 1}
    if task == STEPS:
        return {"first": n + 1, "second": n + 2}
    if task == RELEASED:
        return {"n": n, "attempt": 2}
    if task in (LIMITED, RATED):
        return {"n": n}
    return None


def plan(world: World, runs: int, spread_us: int) -> list[Planned]:
    """``runs`` triggers spread over ``spread_us``, of every task: rate-limited ones in
    bursts (a limit is only tried when more runs come at once than it allows), some
    repeating an earlier trigger's idempotency key."""
    rng = world.rng
    weights = {PLAIN: 5, FLAKY: 2, FAILING: 1, STEPS: 2, LIMITED: 2, RATED: 2, RELEASED: 1}
    names = list(weights)
    planned: list[Planned] = []
    n = 0
    while n < runs:
        task = rng.choices(names, [weights[t] for t in names])[0]
        at = rng.randrange(spread_us)
        burst = min(runs - n, rng.randrange(3, 3 * RATE.rate)) if task == RATED else 1
        for _ in range(burst):
            payload: dict[str, Any] = {"n": n}
            if task in (PLAIN, STEPS, LIMITED) and rng.random() < 0.5:
                payload["work"] = rng.choice((0.01, 0.2, 1.0, 5.0))
            if task == FLAKY:
                payload["fails"] = rng.randrange(FLAKY_ATTEMPTS)
            key = f"key-{n}" if rng.random() < 0.1 else None
            planned.append(Planned(at, task, payload, key))
            if key is not None and rng.random() < 0.5:  # the same trigger again, later
                planned.append(Planned(rng.randrange(spread_us), task, payload, key))
            n += 1
    planned.sort(key=lambda p: p.at_us)
    return planned
