"""Rate limits on the per-message path: a run is claimed at the start it reserved under its
limits (:mod:`runlane_sqs.core.rates` has the rules; docs/rate-limits.md the guide).

Before a claim, a rate-limited run reserves its start in each limit's scope; a start a
moment ahead is waited for on the attempt's thread (:class:`~.driver.Pause`); a later one
makes the run sleep until then, with no attempt counted: its message is held by the
worker up to :data:`~.driver.MAX_HOLD` ahead, or its wakeup published with that delay.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs.core.errors import ConflictError, RunlaneError
from runlane_sqs.core.machine import SkipReason
from runlane_sqs.core.model import Run
from runlane_sqs.core.rates import (
    Rate,
    Reserve,
    ReserveAt,
    on_time,
    reserve_starts,
    to_epoch_us,
    wait_for_rate,
)
from runlane_sqs.engine.driver import (
    MAX_HOLD,
    Disposition,
    DriverCall,
    EngineCall,
    Handling,
    Hold,
    Pause,
    Publish,
    WorkerIdentity,
    Write,
    log_skip,
)
from runlane_sqs.engine.slots import PassSlotsOn
from runlane_sqs.engine.tasks import Task
from runlane_sqs.ports.rates import RateStore
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs.worker")
EARLY_WAKEUP = timedelta(seconds=1)
"""How much earlier than its reserved start the wakeup of a run sleeping for its rate
limits is published for: SQS's delays are whole seconds, and a queue may show a delayed
message a moment late. The worker that receives it holds it until that start."""
MAX_EARLY = 2 * EARLY_WAKEUP
"""The most a wakeup can come before its run's reserved start, rounding down included."""
SHORT_WAIT = timedelta(milliseconds=200)
"""A reserved start at most this far ahead is waited for on the attempt's thread: the
run is claimed then, without a write to sleep and a wakeup."""
RESERVE_LEAD = timedelta(milliseconds=100)
"""How far ahead a claim reserves after its first reservation came too late to use."""
MAX_PAUSES = 3
"""Pauses before a run's reserved start: a sleep may end a moment early by the wall clock."""
MAX_RESERVES = 5
"""Claims of a run that reserved its start again because the reservations' writes took
longer than the grace; then its wakeup is left for redelivery (the run stays due)."""


@dataclass(frozen=True, slots=True)
class Reservation(EngineCall):
    """Reserve a start in one limit's scope (:class:`~runlane_sqs.core.rates.Reserve`
    or :class:`~runlane_sqs.core.rates.ReserveAt`) in the store's rate records. Result:
    what the store answers."""

    asked: Reserve | ReserveAt


def reserve(rates: RateStore, reservation: Reservation) -> int | None:
    """Make ``reservation`` in ``rates``."""
    asked = reservation.asked
    if isinstance(asked, Reserve):
        return rates.reserve(asked.rate, cost=asked.cost, not_before_us=asked.not_before_us)
    return rates.reserve_at(asked.rate, cost=asked.cost, at_us=asked.at_us)


def pause_until_due(run: Run, path: WorkerIdentity) -> Generator[Pause, Any, None]:
    """A run woken a moment before it is due (its reserved start under its rate limits,
    or the end of its debounce: SQS's delays are whole seconds) waits on this thread."""
    for _ in range(MAX_PAUSES):
        now = path.clock.now()
        ahead = (run.due_at or now) - now
        if not timedelta(0) < ahead <= MAX_EARLY:
            return
        yield Pause(ahead)


def reserved_start(
    run: Run, task: Task, lead: timedelta, path: WorkerIdentity
) -> Generator[Reservation, Any, int | None]:
    """The start ``run`` reserves under its rate limits (µs since the epoch), ``lead``
    from now at the earliest; ``None`` for a run without limits, not due, or claiming
    on time."""
    rates = path.tasks.rates_for(run)
    now = path.clock.now()
    if not rates or not run.is_due(now):
        return None
    if run.rate_start is not None:
        if on_time(rates, to_epoch_us(run.rate_start), to_epoch_us(now)):
            return None
        log.info(
            "run %s came %d ms after its rate limits' reserved start: it reserves again",
            run.id,
            (now - run.rate_start) // timedelta(milliseconds=1),
            extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
        )
    reserving = reserve_starts(rates, cost=task.rate_cost, now_us=to_epoch_us(now + lead))
    try:
        asked = next(reserving)
        while True:
            asked = reserving.send((yield Reservation(asked)))
    except StopIteration as done:
        start: int = done.value
        return start


def wait_until_start(
    run: Run, start_us: int, message: ReceivedWakeup, path: WorkerIdentity
) -> Generator[DriverCall | EngineCall, Any, Disposition | None]:
    """Wait for ``run``'s reserved start ``start_us``: on this thread when it is a moment
    ahead (then ``None``: claim now), else by sleeping (:func:`sleep_until_start`)."""
    while True:
        ahead = timedelta(microseconds=start_us - to_epoch_us(path.clock.now()))
        if ahead <= timedelta(0):
            return None
        if ahead > SHORT_WAIT:
            return (yield from sleep_until_start(run, start_us, message, path))
        yield Pause(ahead)  # a moment: not worth a write and a wakeup


def late_for(rates: Sequence[Rate], start_us: int, now: datetime) -> bool:
    """Whether a claim decided at ``now`` comes later than the grace of its reserved
    start allows (its reservation and its read took too long)."""
    return not on_time(rates, start_us, to_epoch_us(now))


def sleep_until_start(
    run: Run, start_us: int, message: ReceivedWakeup, path: WorkerIdentity
) -> Handling:
    """The run is early for its reserved start: it sleeps until then, with no attempt
    counted. A start up to :data:`~.driver.MAX_HOLD` ahead keeps the message in this
    worker until then; a later one has its wakeup published with that delay
    (docs/rate-limits.md)."""
    now = path.clock.now()
    scopes = [r.scope for r in path.tasks.rates_for(run)]
    decision = wait_for_rate(run, start_us, scopes, now=now, republish=path.config.republish)
    try:
        waiting: Run = yield Write(decision)
    except ConflictError:
        return log_skip(run.id, SkipReason.CLAIM_LOST, path.worker_id, run)
    path.observer.delayed(waiting, "rate")
    if path.tasks.slots_for(run):
        yield PassSlotsOn(waiting)
    assert waiting.due_at is not None
    log.info(
        "run %s waits for its rate limits' reserved start until %s",
        run.id,
        waiting.due_at.isoformat(),
        extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
    )
    if waiting.due_at - now <= MAX_HOLD and (yield Hold(message, waiting.due_at)):
        return Disposition.HELD
    if waiting.wake_at is not None:  # whole seconds, early: see EARLY_WAKEUP
        seconds = max(0, int((waiting.due_at - EARLY_WAKEUP - now).total_seconds()))
        with contextlib.suppress(RunlaneError):  # maintenance publishes it otherwise
            yield Publish(waiting, timedelta(seconds=seconds))
    return Disposition.SKIPPED
