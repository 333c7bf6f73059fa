"""The app the chaos worker processes load (``--app chaos.app:app``) and the harness
triggers on, with one task per worker kind.

Every execution of a handler appends two JSON lines to the ground-truth log named by
:data:`LOG_ENV` (``O_APPEND``, one ``write`` per line): ``start`` when it begins and
``end`` with its outcome (``ok``, ``fail``, ``release``) when it returns. The harness
counts executions from this log, not from the library's records.

Payload ``{"i": index, "kind": kind}``, with ``"key"`` and ``"seq"`` (its place among the
runs of that key) for a run triggered with an ordering key, and ``"tenant"`` for a run of
:data:`KEYED_TASK`; kinds:

- ``plain``: returns.
- ``fail_once``: raises on attempt 1 (the retry policy tries again).
- ``release``: releases for a second on attempt 1 (no retry cost), returns after.
- ``sleep``: runs :data:`SLEEP_SECONDS`, past the lease, while the worker heartbeats.
- ``map``: a parent: ``ctx.map`` (``ctx.map_async``) of ``payload["task"]`` over
  ``payload["items"]``, at most ``payload["window"]`` at once; the attempt that waits
  ends ``wait``, the resumed one returns its children's values in item order and their
  sum.
- ``then``: a group's callback (``app.group(..., then=...)``): returns the values of the
  group's children (``ctx.joined_group()``) in item order and their sum.

A child of a ``map`` parent or of an ``app.group`` is one of the first four kinds, or
``broken``, with ``"item"`` (its index) and ``"value"`` in its payload; it returns the
value. A ``broken`` child raises :class:`Broken` (not retried: its run fails) until the
harness has *fixed* its fan-out (:func:`fixed_marker`, a file beside the log, written
just before the harness asks ``retry-failed`` to rerun the group's failed children).
A fan-out's ``"tolerate"`` (a count of children) goes to ``ctx.map`` and ``app.group``.
The parent's and the callback's result holds the group's status too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from runlane_sqs import (
    CatchUp,
    GroupResults,
    RateLimit,
    RetryPolicy,
    Runlane,
    Schedule,
    TaskContext,
    WaitRequested,
)

LOG_ENV = "RUNLANE_CHAOS_LOG"
"""The ground-truth log every execution appends to."""
LEASE_SECONDS = 5.0
REPUBLISH_AFTER_SECONDS = 8.0
REPUBLISH_MAX_SECONDS = 30.0
"""Bounds maintenance's doubling looks at a due run, and how long it holds back the
republish of a wakeup it thinks waits in line (docs/concepts.md, "Lost wakeups"): a
wakeup lost to the purge, in a queue the busy trigger phase never lets a pass see
drained, was held with looks at 8, 16, 32, 64, 128 s... (the product's bound is
``republish_max``, an hour by default), past the drain's bound; within 30 s of its
wakeup's loss it is republished."""
SLEEP_SECONDS = 8.0
"""Longer than the lease: only heartbeats keep such an attempt's lease."""
WORK_SECONDS = 0.2
"""Every other execution works up to this long, so a kill finds some in flight."""
RELEASE_SECONDS = 1.0
MAINTENANCE_SECONDS = 2.0
"""How often maintenance passes (``maintenance run --every 2``, chaos/fleet.py)."""

SYNC_TASK = "chaos.sync"
ASYNC_TASK = "chaos.async"
KEYED_TASK = "chaos.keyed"
"""A sync task whose runs of one tenant (``payload["tenant"]``) hold at most
:data:`KEY_LIMIT` slots at once."""
KEY_LIMIT = 2
RATED_TASK = "chaos.rated"
"""A sync task whose runs start at most :data:`RATE` times a second, fleet-wide."""
RATE = 5
TICK_TASK = "chaos.tick"
TICK = Schedule.every(
    "chaos-tick",
    timedelta(seconds=2),
    payload={"i": -1, "kind": "plain"},
    catch_up=CatchUp.ALL,
)
"""Maintenance creates one run of :data:`TICK_TASK` every two seconds, every occurrence
(none skipped after an outage)."""
SYNC_QUEUE = "sync"
ASYNC_QUEUE = "async"
QUEUES = (SYNC_QUEUE, ASYNC_QUEUE)

PLAIN = "plain"
FAIL_ONCE = "fail_once"
RELEASE = "release"
SLEEP = "sleep"
KINDS = (PLAIN, FAIL_ONCE, RELEASE, SLEEP)
BROKEN = "broken"
"""A child that fails (not retried) until its fan-out is fixed."""
MAP = "map"
THEN = "then"
WAIT = "wait"
"""The end of a parent's attempt that released to wait for its group."""


class InjectedFailure(Exception):
    """The failure a ``fail_once`` run raises on its first attempt."""


class Broken(Exception):
    """The failure of a ``broken`` child before its fan-out is fixed: not retried."""


RETRY = RetryPolicy(max_attempts=20, backoff="fixed", delay=0.5, non_retryable=(Broken,))
"""Generous: a kill, a lost lease or a refused write each cost an attempt."""


def fixed_marker(log_path: str, trigger: int) -> str:
    """The file whose existence says the ``broken`` children of fan-out ``trigger`` are
    fixed (their reruns succeed)."""
    return f"{log_path}.fixed-{trigger}"


def _append(record: dict[str, Any]) -> None:
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class _Execution:
    """One execution's two lines in the ground-truth log."""

    def __init__(self, ctx: TaskContext, payload: Any) -> None:
        self.fields = {
            "run": ctx.run_id,
            "i": payload["i"],
            "kind": payload["kind"],
            "item": payload.get("item"),
            "key": payload.get("key"),
            "seq": payload.get("seq"),
            "tenant": payload.get("tenant"),
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "x": uuid.uuid4().hex[:12],
        }
        self.kind: str = payload["kind"]
        self.attempt = ctx.attempt
        _append({"e": "start", "t": time.time(), **self.fields})

    def end(self, outcome: str) -> None:
        _append({"e": "end", "t": time.time(), "outcome": outcome, **self.fields})


def _decide(execution: _Execution, ctx: TaskContext) -> str | None:
    """What a first attempt does instead of succeeding, or ``None`` to succeed."""
    if execution.attempt == 1 and execution.kind == FAIL_ONCE:
        execution.end("fail")
        raise InjectedFailure(f"run {ctx.run_id}: first attempt fails on purpose")
    if execution.attempt == 1 and execution.kind == RELEASE:
        execution.end("release")
        ctx.release(delay=RELEASE_SECONDS)
    fixed = fixed_marker(os.environ[LOG_ENV], int(execution.fields["i"]))
    if execution.kind == BROKEN and not os.path.exists(fixed):
        execution.end("fail")
        raise Broken(f"run {ctx.run_id}: a broken child fails until its fan-out is fixed")
    return None


@contextlib.contextmanager
def _fanning_in(execution: _Execution) -> Iterator[None]:
    """Ends the execution ``wait`` when the attempt releases to wait for its group, and
    ``fail`` when a storage request of the fan-in fails (a fault the proxy injected:
    the retry policy tries again)."""
    try:
        yield
    except WaitRequested:
        execution.end(WAIT)
        raise
    except Exception:
        execution.end("fail")
        raise


def _callback_group(ctx: TaskContext) -> GroupResults:
    group = ctx.joined_group()
    if group is None:
        raise LookupError(f"run {ctx.run_id}: a then callback without its joined group")
    return group


def _values(results: GroupResults) -> list[Any]:
    """The children's values in item order (``None`` for a child that did not succeed)."""
    return [None if r is None else r["value"] for r in results.results()]


def _joined(
    execution: _Execution, payload: Any, results: GroupResults, values: list[Any]
) -> dict[str, Any]:
    """A parent's or callback's result: its group, its status and its children's values,
    in order."""
    group_id, status = results.group_id, results.status.value
    execution.end("ok")
    return {
        "i": payload["i"],
        "pid": os.getpid(),
        "group": group_id,
        "status": status,
        "values": values,
        "sum": sum(v for v in values if v is not None),
    }


def _done(execution: _Execution, payload: Any) -> dict[str, Any]:
    execution.end("ok")
    return {"i": payload["i"], "pid": os.getpid(), "value": payload.get("value")}


def run_sync(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    execution = _Execution(ctx, payload)
    if execution.kind in (MAP, THEN):
        with _fanning_in(execution):
            if execution.kind == MAP:
                window, tolerate = payload["window"], payload.get("tolerate", 0)
                results = ctx.map(
                    payload["task"], payload["items"], max_in_flight=window, tolerate=tolerate
                )
            else:
                results = _callback_group(ctx)
            values = _values(results)
        return _joined(execution, payload, results, values)
    _decide(execution, ctx)
    time.sleep(SLEEP_SECONDS if execution.kind == SLEEP else random.uniform(0, WORK_SECONDS))
    return _done(execution, payload)


async def run_async(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    execution = _Execution(ctx, payload)
    if execution.kind in (MAP, THEN):
        with _fanning_in(execution):
            if execution.kind == MAP:
                window, tolerate = payload["window"], payload.get("tolerate", 0)
                results = await ctx.map_async(
                    payload["task"], payload["items"], max_in_flight=window, tolerate=tolerate
                )
            else:
                results = await asyncio.to_thread(_callback_group, ctx)
            values = await asyncio.to_thread(_values, results)
        return _joined(execution, payload, results, values)
    _decide(execution, ctx)
    await asyncio.sleep(
        SLEEP_SECONDS if execution.kind == SLEEP else random.uniform(0, WORK_SECONDS)
    )
    return _done(execution, payload)


def build_app(**options: Any) -> Runlane:
    """The chaos app from the environment (``RUNLANE_TABLE``, ``RUNLANE_QUEUE_PREFIX``,
    boto3's variables) with a short lease, so recovery is quick."""
    app = Runlane.from_env(
        environment="chaos",
        lease_duration=LEASE_SECONDS,
        republish_after=REPUBLISH_AFTER_SECONDS,
        republish_max=REPUBLISH_MAX_SECONDS,
        maintenance_period=MAINTENANCE_SECONDS,
        **options,
    )
    app.task(run_sync, name=SYNC_TASK, queue=SYNC_QUEUE, retry=RETRY)
    app.task(run_async, name=ASYNC_TASK, queue=ASYNC_QUEUE, retry=RETRY)
    app.task(
        run_sync,
        name=RATED_TASK,
        queue=SYNC_QUEUE,
        retry=RETRY,
        rate_limits=[RateLimit(RATE, per=1)],
    )
    app.task(run_sync, name=TICK_TASK, queue=SYNC_QUEUE, retry=RETRY, schedules=[TICK])
    app.task(
        run_sync,
        name=KEYED_TASK,
        queue=SYNC_QUEUE,
        retry=RETRY,
        concurrency_key=_tenant,
        key_limit=KEY_LIMIT,
    )
    return app


def _tenant(payload: Any) -> str:
    return str(payload["tenant"])


app = build_app()
