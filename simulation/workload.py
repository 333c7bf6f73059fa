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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import greenlet

from runlane_sqs import Batch, Debounce, RateLimit, RetryPolicy, Runlane, Schedule
from runlane_sqs.core.groups import GroupFailed
from runlane_sqs.core.model import LinkKind
from runlane_sqs.core.rates import to_epoch_us
from runlane_sqs.engine.context import TaskContext
from simulation.world import EPOCH, World

PLAIN = "sim.plain"
PLAIN_STAGES = 2
"""``sim.plain`` reports ``0``, ``1`` and then ``PLAIN_STAGES`` of ``PLAIN_STAGES``."""
FLAKY = "sim.flaky"
FAILING = "sim.failing"
STEPS = "sim.steps"
LIMITED = "sim.limited"
RATED = "sim.rated"
RELEASED = "sim.released"
FANOUT = "sim.fanout"
CHILD = "sim.child"
LARGE = "sim.large"
TRANSACTED = "sim.transacted"
SIGNALLED = "sim.signalled"
TOKENED = "sim.tokened"
WAITER = "sim.waiter"
SCHEDULED = "sim.scheduled"
KEYED = "sim.keyed"
SINGLE = "sim.single"
DEBOUNCED = "sim.debounced"
BATCHED = "sim.batched"
ORDERED = "sim.ordered"
DEADLINED = "sim.deadlined"
KEY_RATED = "sim.keyrated"
CHORD = "sim.chord"
"""Not a task: a group the producer starts with ``app.group(..., then=...)``, of
``sim.child`` runs, whose callback is ``sim.callback``."""
CALLBACK = "sim.callback"
RELEASED_SIGNALLED = "sim.released-signalled"
PINNED = "sim.pinned"
ORDERS = "sim-orders"
"""The producer's own table, written in one transaction with the runs it triggers."""
BUCKET = "sim-payloads"
INLINE_LIMIT = 1024
"""Values over this many bytes go to the payload bucket: every run of ``sim.large``."""
LIMITED_QUEUE = "limited"
CONCURRENCY_LIMIT = 2
RATE = RateLimit(5, per=1)
KEYED_TASK_RATE = RateLimit(4, per=1)
"""Every run of ``sim.keyrated``, whatever its key: with the per-key limit, two limits."""
KEY_RATE = RateLimit(2, per=1, per_key=True)
"""Each key of ``sim.keyrated`` (its concurrency key)."""
FLAKY_ATTEMPTS = 4
FAILING_ATTEMPTS = 2
KEY_LIMIT = 1
"""Runs of ``sim.keyed`` with one concurrency key that may hold a lease at once."""
KEYS = ("k0", "k1", "k2")
"""The keys of keyed, singleton, debounced, batched and ordered runs."""
SCHEDULE_ID = "sim.every"
SCHEDULE_SECONDS = 10


def merged(current: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A debounced run's payload: every collapsed trigger's items, once each."""
    return {"key": new["key"], "items": sorted(set(current["items"]) | set(new["items"]))}


DEBOUNCE = Debounce(quiet=1, max_wait=4, key=lambda p: p["key"], merge=merged)
BATCH = Batch(size=4, max_age=2, key=lambda p: p["key"])
SIGNAL_TIMEOUT_SECONDS = 600
"""Long enough that a run the operator knows is signalled before it."""
DEADLINE_SECONDS = 2
DEADLINE_ATTEMPTS = 5
SLOW_SECONDS = 120
"""How long a slow attempt of ``sim.deadlined`` would work if nobody stopped it."""
UNCHECKED = frozenset({SINGLE, DEBOUNCED, BATCHED})
"""Tasks whose runs carry other triggers' payloads: their results are checked by their
own invariants, not against the trigger a producer was given the run by."""
TASKS = (
    PLAIN,
    FLAKY,
    FAILING,
    STEPS,
    LIMITED,
    RATED,
    RELEASED,
    FANOUT,
    CHILD,
    LARGE,
    TRANSACTED,
    SIGNALLED,
    TOKENED,
    WAITER,
    SCHEDULED,
    KEYED,
    SINGLE,
    DEBOUNCED,
    BATCHED,
    ORDERED,
    DEADLINED,
    KEY_RATED,
    CALLBACK,
    RELEASED_SIGNALLED,
    PINNED,
)
URGENT_QUEUE = "urgent"
"""Where some plain runs are triggered (``queue=``): workers poll it three times as often."""
QUEUES = ("default", LIMITED_QUEUE, URGENT_QUEUE)
WEIGHTS = {URGENT_QUEUE: 3}
"""Each worker's queue weights (a queue not named has weight 1)."""
CHORD_REDRIVES = 2
"""At most this many ``retry-failed`` of one chord by the operator."""


EPOCH_US = to_epoch_us(EPOCH)


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
    version: str = ""
    """The app version of the process that entered it."""
    key: str | None = None
    """The key the attempt's run holds, prefixed by its task (a concurrency key held one
    at a time or rate-limited per key, a singleton or ordering key)."""
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
    key_overlaps: list[str] = field(default_factory=list)
    """Handler entries that found another attempt with their key live (keys held one at a
    time: a key limit of 1, singleton and ordering keys)."""
    past_deadline: list[str] = field(default_factory=list)
    """Attempts that worked far past their deadline without being told to stop."""
    turns: dict[str, list[str]] = field(default_factory=dict)
    """Each worker's receives (by worker id): the queue each one tried first."""
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
        world.note(f"handler of {task} entered, attempt {ctx.attempt}", ctx.run_id)
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

    def __init__(self, world: World, ledger: Ledger, skew_margin_us: int, version: str) -> None:
        self.world = world
        self.ledger = ledger
        self.skew_margin_us = skew_margin_us
        """Leases are compared across processes' clocks: give or take their skews."""
        self.version = version
        """The app version of the process whose app registers them."""

    @contextmanager
    def attempt(self, ctx: TaskContext, task: str) -> Iterator[Entry]:
        """Note the handler's entry, with its attempt's lease as the claim left it, and
        its end, however it ends (a return, a failure, a wait)."""
        lease = ctx.services.run().lease if ctx.services is not None else None
        expires = to_epoch_us(lease.expires_at) if lease is not None else 0
        token = lease.token if lease is not None else ""
        entry = self.ledger.entered(self.world, ctx, task, expires, token)
        entry.version = self.version
        try:
            yield entry
        finally:
            self.ledger.left(ctx)

    @staticmethod
    def work(payload: dict[str, Any]) -> None:
        seconds = float(payload.get("work", 0))
        if seconds:
            time.sleep(seconds)  # virtual time: other processes run meanwhile

    def plain(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Reports its progress before, halfway through and after its work (29: the last
        report rides on the outcome; the ones between are coalesced and fenced)."""
        with self.attempt(ctx, PLAIN):
            ctx.progress(0, PLAIN_STAGES, "starting")
            half = {"work": float(payload.get("work", 0)) / 2}
            self.work(half)
            ctx.progress(1, PLAIN_STAGES, "halfway")
            self.work(half)
            ctx.progress(PLAIN_STAGES, PLAIN_STAGES, "done")
            return {"n": payload["n"], "double": 2 * payload["n"]}

    def flaky(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, FLAKY):
            self.work(payload)
            if ctx.attempt <= payload["fails"]:
                raise RuntimeError(f"attempt {ctx.attempt} fails by design")
            return {"n": payload["n"], "attempt": ctx.attempt}

    def failing(self, ctx: TaskContext, payload: dict[str, Any]) -> None:
        with self.attempt(ctx, FAILING):
            raise ValueError("fails every time, by design")

    def steps(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, STEPS):
            n = payload["n"]
            first = ctx.step("first", lambda: self.stepped(ctx, "first", n + 1))
            self.work(payload)
            second = ctx.step("second", lambda: self.stepped(ctx, "second", n + 2))
            return {"first": first, "second": second}

    def stepped(self, ctx: TaskContext, name: str, value: int) -> int:
        self.ledger.step_calls[(ctx.run_id, name)] += 1
        return value

    def limited(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, LIMITED) as entry:
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
            return {"n": payload["n"]}

    @contextmanager
    def keyed_entry(self, ctx: TaskContext, task: str, key: str) -> Iterator[Entry]:
        """Note the entry of an attempt whose run holds ``key`` (one at a time): another
        attempt of the key with a live lease is an overlap."""
        with self.attempt(ctx, task) as entry:
            entry.key = f"{task}:{key}" if task != ORDERED else f"ordering:{key}"
            live = [
                e
                for e in self.ledger.open.values()
                if e.key == entry.key
                and e is not entry
                and e.lease_expires_us > entry.at_us + self.skew_margin_us
            ]
            if live:
                holders = ", ".join(f"{e.run_id}#{e.attempt}@{e.process}" for e in live)
                self.ledger.key_overlaps.append(
                    f"{ctx.run_id}#{ctx.attempt} of key {entry.key} entered on "
                    f"{entry.process} while {holders} held live leases"
                )
            yield entry

    def rated(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, RATED):
            return {"n": payload["n"]}

    def key_rated(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Under a task-wide limit and a per-key one (its key its concurrency key)."""
        with self.attempt(ctx, KEY_RATED) as entry:
            entry.key = f"{KEY_RATED}:{payload['key']}"
            return {"n": payload["n"]}

    def released(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, RELEASED):
            if ctx.attempt == 1:
                ctx.release(delay=float(payload.get("pause", 2)))
            return {"n": payload["n"], "attempt": ctx.attempt}

    def fanout(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """A map over ``items`` children, every ``fail_every``-th failing for good."""
        with self.attempt(ctx, FANOUT):
            try:
                joined = ctx.map(
                    CHILD,
                    children(payload),
                    tolerate=payload["tolerate"],
                    max_in_flight=payload["in_flight"],
                )
            except GroupFailed:  # how many failed by then depends on the timing
                return {"n": payload["n"], "group": "failed"}
            total = sum(r for r in joined.results() if isinstance(r, int))
            return {"n": payload["n"], "group": "ok", "sum": total, "failed": joined.failed}

    def child(self, ctx: TaskContext, payload: dict[str, Any]) -> int:
        """Item ``i`` of a group: fails for good if its payload says so, unless it is a
        chord's child rerun by ``retry-failed`` (linked to the child it replaces)."""
        with self.attempt(ctx, CHILD):
            self.work(payload)
            run = ctx.services.run() if ctx.services is not None else None
            rerun = run is not None and run.source_kind == LinkKind.RETRY.value
            if payload["fail"] and not (rerun and payload.get("rerun_ok")):
                raise ValueError(f"child {payload['i']} fails by design")
            return int(payload["i"]) ** 2

    def callback(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """A chord's callback: what its joined group says, and the sum of its children's
        results (read from storage)."""
        with self.attempt(ctx, CALLBACK):
            group = ctx.joined_group()
            if group is None:
                return {"n": payload["n"], "status": None}
            return {
                "n": payload["n"],
                "status": group.status.value,
                "succeeded": group.succeeded,
                "failed": group.failed,
                "cancelled": group.cancelled,
                "sum": sum(r for r in group.results() if isinstance(r, int)),
            }

    def large(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """A payload and a result over the inline limit: both kept in the payload bucket."""
        with self.attempt(ctx, LARGE):
            self.work(payload)
            return {"n": payload["n"], "echo": payload["blob"]}

    def transacted(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, TRANSACTED):
            return {"n": payload["n"], "order": payload["order"]}

    def signalled(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Waits for the signal an operator sends its key once it waits (with a timeout: a
        run whose trigger's answer was lost is unknown to the operator, nobody signals it)."""
        with self.attempt(ctx, SIGNALLED):
            signal = ctx.wait_for_signal(signal_key(payload), timeout=SIGNAL_TIMEOUT_SECONDS)
            return {"n": payload["n"], "value": signal.payload}

    def released_signalled(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Releases its first attempt for a moment, then waits for its signal (sent once it
        waits for it, as to a ``sim.signalled`` run)."""
        with self.attempt(ctx, RELEASED_SIGNALLED):
            if ctx.attempt == 1:
                ctx.release(delay=float(payload["pause"]))
            signal = ctx.wait_for_signal(signal_key(payload), timeout=SIGNAL_TIMEOUT_SECONDS)
            return {"n": payload["n"], "value": signal.payload}

    def pinned(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Of a task pinned to the version it started under: releases its first attempt
        for a moment, so the next one must find a worker of that version."""
        with self.attempt(ctx, PINNED):
            if ctx.attempt == 1:
                ctx.release(delay=float(payload["pause"]))
            return {"n": payload["n"]}

    def tokened(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Waits for the token its producer created; an operator completes it."""
        with self.attempt(ctx, TOKENED):
            decision = ctx.wait_for_token(payload["token"])
            return {"n": payload["n"], "value": decision.value}

    def waiter(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Waits for the run its producer triggered just before it."""
        with self.attempt(ctx, WAITER):
            outcome = ctx.wait_for_run(payload["target"])
            return {"n": payload["n"], "status": outcome.status.value, "result": outcome.result}

    def scheduled(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, SCHEDULED):
            at = ctx.scheduled_for.isoformat() if ctx.scheduled_for else None
            return {"schedule": ctx.schedule_id, "at": at}

    def keyed(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.keyed_entry(ctx, KEYED, payload["key"]):
            self.work(payload)
            return {"n": payload["n"]}

    def single(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Triggered with its key as singleton key: one unfinished run per key."""
        with self.keyed_entry(ctx, SINGLE, payload["key"]):
            self.work(payload)
            return {"key": payload["key"]}

    def debounced(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        with self.attempt(ctx, DEBOUNCED):
            return {"items": payload["items"]}

    def batched(self, ctx: TaskContext, items: list[dict[str, Any]]) -> list[int]:
        with self.attempt(ctx, BATCHED):
            return [item["n"] for item in items]

    def ordered(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Triggered with its key as ordering key; fails its first attempt in some."""
        with self.keyed_entry(ctx, ORDERED, payload["key"]):
            self.work(payload)
            if ctx.attempt <= payload["fails"]:
                raise RuntimeError(f"attempt {ctx.attempt} fails by design")
            return {"n": payload["n"]}

    def deadlined(self, ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        """Its first ``slow`` attempts work past the task's deadline, until they are told
        to stop (the worker sets the cancellation at its heartbeat after the deadline)."""
        with self.attempt(ctx, DEADLINED) as entry:
            if ctx.attempt > payload["slow"]:
                return {"n": payload["n"], "slow": payload["slow"]}
            step_us = 500_000
            for _ in range(SLOW_SECONDS * 1_000_000 // step_us):
                if ctx.cancelled:
                    raise TimeoutError(f"attempt {ctx.attempt} stopped past its deadline")
                time.sleep(step_us / 1e6)
            self.ledger.past_deadline.append(
                f"{ctx.run_id}#{ctx.attempt} on {entry.process} worked {SLOW_SECONDS} s past "
                f"its {DEADLINE_SECONDS} s deadline, never told to stop"
            )
            return {"n": payload["n"], "slow": payload["slow"]}


def signal_key(payload: dict[str, Any]) -> str:
    return f"signal-{payload['n']}"


def signal_value(payload: dict[str, Any]) -> dict[str, Any]:
    """What the operator sends a signalled run (and completes a tokened run's token with)."""
    return {"v": 7 * payload["n"]}


def children(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A fan-out's or a chord's items: child ``i`` fails for good if ``fail_every``
    divides it (a chord's child rerun by ``retry-failed`` succeeds)."""
    every = payload["fail_every"]
    rerun_ok = {"rerun_ok": True} if "chord" in payload else {}
    return [
        {
            "i": i,
            "fail": bool(every) and i % every == 0,
            "work": payload.get("child_work", 0),
            **rerun_ok,
        }
        for i in range(payload["items"])
    ]


def schedule(spread_seconds: int) -> Schedule:
    """Every 10 s while the producers trigger: each occurrence is one run (catch-up
    ``all``, so one missed while an operator paused it is made when it resumes)."""
    start = EPOCH + timedelta(seconds=SCHEDULE_SECONDS)
    end = EPOCH + timedelta(seconds=max(spread_seconds, 2 * SCHEDULE_SECONDS))
    return Schedule.every(
        SCHEDULE_ID,
        SCHEDULE_SECONDS,
        start_at=start,
        end_at=end,
        catch_up="all",
        payload={"schedule": SCHEDULE_ID},
    )


def register(app: Runlane, handlers: Handlers, spread_seconds: int) -> None:
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
    app.task(
        handlers.key_rated,
        name=KEY_RATED,
        concurrency_key=lambda p: p["key"],
        rate_limits=[KEYED_TASK_RATE, KEY_RATE],
    )
    app.task(handlers.released, name=RELEASED)
    app.task(handlers.fanout, name=FANOUT)
    app.task(handlers.child, name=CHILD)
    app.task(handlers.callback, name=CALLBACK)
    app.task(handlers.large, name=LARGE)
    app.task(handlers.transacted, name=TRANSACTED)
    app.task(handlers.signalled, name=SIGNALLED)
    app.task(handlers.released_signalled, name=RELEASED_SIGNALLED)
    app.task(handlers.pinned, name=PINNED, pin_version=True)
    app.task(handlers.tokened, name=TOKENED)
    app.task(handlers.waiter, name=WAITER)
    app.task(handlers.scheduled, name=SCHEDULED, schedules=[schedule(spread_seconds)])
    app.task(handlers.keyed, name=KEYED, key_limit=KEY_LIMIT, concurrency_key=lambda p: p["key"])
    app.task(handlers.single, name=SINGLE)
    app.task(handlers.debounced, name=DEBOUNCED, debounce=DEBOUNCE)
    app.task(handlers.batched, name=BATCHED, batch=BATCH)
    app.task(
        handlers.ordered,
        name=ORDERED,
        retry=RetryPolicy(max_attempts=FLAKY_ATTEMPTS, delay=0.5, jitter=0),
    )
    app.task(
        handlers.deadlined,
        name=DEADLINED,
        timeout=DEADLINE_SECONDS,
        retry=RetryPolicy(max_attempts=DEADLINE_ATTEMPTS, delay=0.5, jitter=0),
    )


@dataclass(frozen=True)
class Planned:
    """One trigger a producer makes: when, of what, with which key."""

    at_us: int
    task: str
    payload: dict[str, Any]
    idempotency_key: str | None = None
    order: str | None = None
    """With a transactional trigger: the order written with it (``attribute_not_exists``:
    an order written before rolls the transaction back)."""
    queue: str | None = None
    """The queue the trigger gives the run, instead of its task's."""

    @property
    def options(self) -> dict[str, str]:
        """The trigger's queue and keys: idempotency, singleton and ordering."""
        options = {"idempotency_key": self.idempotency_key} if self.idempotency_key else {}
        if self.queue is not None:
            options["queue"] = self.queue
        if self.task == SINGLE:
            options["singleton_key"] = self.payload["key"]
        if self.task == ORDERED:
            options["ordering_key"] = self.payload["key"]
        return options


def fanout_result(payload: dict[str, Any]) -> dict[str, Any]:
    """What a fan-out returns: its group failed past its tolerance, or the children's sum."""
    items = children(payload)
    failed = sum(1 for item in items if item["fail"])
    if failed > payload["tolerate"]:
        return {"n": payload["n"], "group": "failed"}
    total = sum(item["i"] ** 2 for item in items if not item["fail"])
    return {"n": payload["n"], "group": "ok", "sum": total, "failed": failed}


EXPECTED: dict[str, Callable[[dict[str, Any]], Any]] = {
    PLAIN: lambda p: {"n": p["n"], "double": 2 * p["n"]},
    FAILING: lambda p: None,
    STEPS: lambda p: {"first": p["n"] + 1, "second": p["n"] + 2},
    LIMITED: lambda p: {"n": p["n"]},
    RATED: lambda p: {"n": p["n"]},
    FANOUT: fanout_result,
    CHILD: lambda p: None if p["fail"] else p["i"] ** 2,
    LARGE: lambda p: {"n": p["n"], "echo": p["blob"]},
    TRANSACTED: lambda p: {"n": p["n"], "order": p["order"]},
    SIGNALLED: lambda p: {"n": p["n"], "value": signal_value(p)},
    TOKENED: lambda p: {"n": p["n"], "value": signal_value(p)},
    WAITER: lambda p: {
        "n": p["n"],
        "status": "succeeded" if p["target_ok"] else "failed",
        "result": EXPECTED[PLAIN]({"n": p["target_n"]}) if p["target_ok"] else None,
    },
    KEYED: lambda p: {"n": p["n"]},
    KEY_RATED: lambda p: {"n": p["n"]},
    RELEASED_SIGNALLED: lambda p: {"n": p["n"], "value": signal_value(p)},
    PINNED: lambda p: {"n": p["n"]},
    ORDERED: lambda p: {"n": p["n"]},
    DEADLINED: lambda p: {"n": p["n"], "slow": p["slow"]},
}
"""What a run of each task returns when it succeeds, from its payload."""
FIRST_SUCCESS: dict[str, Callable[[dict[str, Any]], int]] = {
    FLAKY: lambda p: int(p["fails"]) + 1,
    RELEASED: lambda p: 2,
}
"""The earliest attempt that can succeed, of the tasks whose result names its attempt: a
later one succeeds when an attempt before it was lost (its process crashed or paused past
its lease) or its claim given back."""


def expected_result(task: str, payload: dict[str, Any], attempt: int) -> Any:
    """What a run of ``task`` returns when its attempt ``attempt`` (its last) succeeds."""
    first = FIRST_SUCCESS.get(task)
    if first is not None:
        return {"n": payload["n"], "attempt": max(attempt, first(payload))}
    return EXPECTED[task](payload)


BURSTS = frozenset({RATED, KEY_RATED, KEYED, SINGLE, DEBOUNCED, BATCHED, ORDERED})
"""Tasks triggered in bursts: a limit, a key or a collapse is only tried by several at once."""
AT_ONCE = frozenset({RATED, KEY_RATED})
"""Tasks whose bursts come at one instant (a rate limit is tried by more runs at once than
it allows); other bursts' triggers come a moment apart."""
IDEMPOTENT = frozenset({PLAIN, FLAKY, FAILING, STEPS, LIMITED, RATED, RELEASED, FANOUT, LARGE})
"""Tasks some triggers of which carry an idempotency key."""


def plan(
    world: World, runs: int, spread_us: int, mix: frozenset[str] | None = None
) -> list[Planned]:
    """``runs`` triggers spread over ``spread_us``, of every task: rate-limited ones in
    bursts (a limit is only tried when more runs come at once than it allows), some
    repeating an earlier trigger's idempotency key, some transactional (a few rolled back
    by an order written before). ``mix``: only these tasks (default: every one)."""
    rng = world.rng
    weights = {  # the waits, keys and deadline: about a fifth of the runs
        PLAIN: 10,
        FLAKY: 4,
        FAILING: 2,
        STEPS: 4,
        LIMITED: 4,
        RATED: 4,
        RELEASED: 2,
        FANOUT: 2,
        LARGE: 2,
        TRANSACTED: 2,
        SIGNALLED: 1,
        TOKENED: 1,
        WAITER: 1,
        KEYED: 1,
        SINGLE: 1,
        DEBOUNCED: 1,
        BATCHED: 1,
        ORDERED: 1,
        DEADLINED: 1,
        KEY_RATED: 2,
        CHORD: 2,
        RELEASED_SIGNALLED: 1,
        PINNED: 2,
    }
    names = [task for task in weights if mix is None or task in mix]
    planned: list[Planned] = []
    n = 0
    while n < runs:
        task = rng.choices(names, [weights[t] for t in names])[0]
        at = rng.randrange(spread_us)
        burst = 1
        if task == RATED:
            burst = min(runs - n, rng.randrange(3, 3 * RATE.rate))
        elif task == KEY_RATED:  # on the keys at random: two or more on one key, often
            burst = min(runs - n, rng.randrange(3, 5 * KEY_RATE.rate))
        elif task in BURSTS:
            burst = min(runs - n, rng.randrange(2, 6))
        for _ in range(burst):
            payload = planned_payload(world, task, n)
            keyed = task in IDEMPOTENT and rng.random() < 0.1
            key = f"key-{n}" if keyed else None
            order = None
            if task == TRANSACTED:  # one in five names an order written before
                order = f"order-{rng.randrange(n)}" if n and rng.random() < 0.2 else f"order-{n}"
                payload["order"] = order
            queue = URGENT_QUEUE if task == PLAIN and rng.random() < 0.25 else None
            planned.append(Planned(at, task, payload, key, order, queue))
            if key is not None and rng.random() < 0.5:  # the same trigger again, later
                planned.append(Planned(rng.randrange(spread_us), task, payload, key, None, queue))
            n += 1
            if task in BURSTS and task not in AT_ONCE:  # a burst of triggers a moment apart
                at += rng.randrange(100_000, 1_500_000)
    planned.sort(key=lambda p: p.at_us)
    return planned


def waiting_payload(world: World, task: str, n: int) -> dict[str, Any]:
    """What a run that waits, holds a key or has a deadline needs in its payload."""
    rng = world.rng
    payload: dict[str, Any] = {}
    if task in (KEYED, SINGLE, DEBOUNCED, BATCHED, ORDERED, KEY_RATED):
        payload["key"] = rng.choice(KEYS)
    if task in (RELEASED_SIGNALLED, PINNED):
        payload["pause"] = rng.choice((0.5, 2.0))
    if task in (KEYED, SINGLE, ORDERED):
        payload["work"] = rng.choice((0.01, 0.5, 2.0))
    if task == ORDERED:
        payload["fails"] = int(rng.random() < 0.2)
    if task == DEBOUNCED:
        payload["items"] = [n]
    if task == WAITER:  # the run it waits for: a plain one, or one that fails
        payload.update(target_n=n, target_ok=rng.random() < 0.7)
    if task == DEADLINED:
        payload["slow"] = rng.choice((0, 0, 1, 2))
    return payload


def planned_payload(world: World, task: str, n: int) -> dict[str, Any]:
    rng = world.rng
    payload: dict[str, Any] = {"n": n}
    if task in (PLAIN, STEPS, LIMITED, LARGE) and rng.random() < 0.5:
        payload["work"] = rng.choice((0.01, 0.2, 1.0, 5.0))
    if task == FLAKY:
        payload["fails"] = rng.randrange(FLAKY_ATTEMPTS)
    if task in (FANOUT, CHORD):
        payload.update(
            items=rng.randrange(0, 12),
            fail_every=rng.choice((0, 0, 2, 3, 5)),
            tolerate=rng.randrange(0, 3),
            in_flight=rng.randrange(1, 5),
            child_work=rng.choice((0, 0.05, 1.0)),
        )
    if task == CHORD:  # its children, rerun by retry-failed, succeed
        payload["chord"] = True
    payload.update(waiting_payload(world, task, n))
    if task == LARGE:  # one of five payloads: runs share their payload's object
        payload["n"] = n % 5
        payload["blob"] = f"{n % 5:08d}" * (INLINE_LIMIT // 8 + 8)
    return payload
