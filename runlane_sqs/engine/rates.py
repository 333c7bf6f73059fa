"""Rate limits on the per-message path: a run's handler is entered at the start it
reserved under its limits (:mod:`runlane_sqs.core.rates` has the rules; docs/rate-limits.md
the guide).

Before a claim, a rate-limited run reserves its start in each limit's scope, its worker's
claim lead (:class:`~runlane_sqs.core.rates.ClaimLead`) ahead of now at the earliest. A
run whose start is a moment ahead is claimed at once, and after the claim's write its
thread waits for the start (:class:`~.driver.Pause`) and enters the handler then; a claim
that came back later than the grace after the start is given back, and the run sleeps
until a start reserved again. A later start makes the run sleep until the lead before it,
with no attempt counted: its message is held by the worker up to
:data:`~.driver.MAX_HOLD` ahead, or its wakeup published with that delay.
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
    far_ahead,
    past_grace,
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
MAX_PAUSES = 3
"""Pauses before a run's due time: a sleep may end a moment early by the wall clock."""
MAX_RESERVES = 5
"""Claims of a run that reserved its start again because its reservations took longer
than the lead and the grace; then its wakeup is left for redelivery (the run stays due)."""


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
    """A run woken a moment before it is due (a short wait before its reserved start under
    its rate limits, or the end of its debounce: SQS's delays are whole seconds) waits on
    this thread."""
    for _ in range(MAX_PAUSES):
        now = path.clock.now()
        ahead = (run.due_at or now) - now
        if not timedelta(0) < ahead <= MAX_EARLY:
            return
        yield Pause(ahead)


def reserved_start(
    run: Run, task: Task, path: WorkerIdentity
) -> Generator[Reservation, Any, int | None]:
    """The start of ``run`` under its rate limits (µs since the epoch): the one it slept
    for while its handler may still be entered then, else one reserved now; ``None`` for
    a run without limits or not due."""
    rates = path.tasks.rates_for(run)
    now = path.clock.now()
    if not rates or not run.is_due(now):
        return None
    if run.rate_start is not None:
        start_us = to_epoch_us(run.rate_start)
        if not past_grace(rates, start_us, to_epoch_us(now)):
            return start_us
        log.info(
            "run %s came %d ms after its rate limits' reserved start: it reserves again",
            run.id,
            (now - run.rate_start) // timedelta(milliseconds=1),
            extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
        )
    return (yield from reserve_ahead(rates, task.rate_cost, now, path))


def sleeps_first(run: Run, start_us: int, path: WorkerIdentity) -> bool:
    """Whether ``run``, whose start under its rate limits is ``start_us``, sleeps until the
    lead before it rather than being claimed now: a start reserved now that is further
    ahead than the path's lead and a short wait. A start the run slept for is claimed when
    the run is due, whatever the lead has become since."""
    slept_for = run.rate_start is not None and start_us == to_epoch_us(run.rate_start)
    now_us = to_epoch_us(path.clock.now())
    return not slept_for and far_ahead(start_us, now_us, path.claim_lead.lead)


def reserve_ahead(
    rates: Sequence[Rate], cost: int, now: datetime, path: WorkerIdentity
) -> Generator[Reservation, Any, int]:
    """Reserve a start under ``rates`` the path's claim lead after ``now`` at the
    earliest: room for the reservations and the claim's write before it."""
    lead = path.claim_lead.lead
    reserving = reserve_starts(rates, cost=cost, now_us=to_epoch_us(now + lead))
    try:
        asked = next(reserving)
        while True:
            asked = reserving.send((yield Reservation(asked)))
    except StopIteration as done:
        start: int = done.value
        return start


def pause_until(at_us: int, path: WorkerIdentity) -> Generator[Pause, Any, None]:
    """Wait on this thread until ``at_us`` (µs since the epoch) by the path's clock: a
    pause that ends a moment early is followed by another."""
    while (ahead := at_us - to_epoch_us(path.clock.now())) > 0:
        yield Pause(timedelta(microseconds=ahead))


def enter_at_start(
    claimed: Run,
    task: Task,
    start_us: int,
    asked_at: datetime,
    message: ReceivedWakeup,
    path: WorkerIdentity,
) -> Generator[DriverCall | EngineCall, Any, Disposition | None]:
    """After the claim's write (its first reservation asked at ``asked_at``, which the
    path's claim lead learns from), wait on this thread until the reserved start
    ``start_us``; ``None``: enter the handler now, no later than the grace after it. A
    claim that came back later than that does not enter: the run reserves again, the
    lead (grown by this claim) ahead, and is given back to sleep until then
    (docs/rate-limits.md, "How exact")."""
    path.claim_lead.took(path.clock.now() - asked_at)
    yield from pause_until(start_us, path)
    rates = path.tasks.rates_for(claimed)
    now = path.clock.now()
    if not past_grace(rates, start_us, to_epoch_us(now)):
        return None
    log.info(
        "the claim of run %s came back %d ms after its rate limits' reserved start: it is "
        "given back unrun and reserves again",
        claimed.id,
        (to_epoch_us(now) - start_us) // 1000,
        extra={"run_id": claimed.id, "task": claimed.task, "worker_id": path.worker_id},
    )
    start = yield from reserve_ahead(rates, task.rate_cost, now, path)
    return (yield from sleep_until_start(claimed, start, message, path))


def sleep_until_start(
    run: Run, start_us: int, message: ReceivedWakeup, path: WorkerIdentity
) -> Handling:
    """The run is early for its reserved start: it sleeps until then, with no attempt
    counted (a claimed run, back too late for its previous start, is given back unrun in
    the same write, its attempt counted). A start up to :data:`~.driver.MAX_HOLD` ahead
    keeps the message in this worker until then; a later one has its wakeup published
    with that delay (docs/rate-limits.md)."""
    now = path.clock.now()
    scopes = [r.scope for r in path.tasks.rates_for(run)]
    decision = wait_for_rate(
        run,
        start_us,
        scopes,
        now=now,
        lead=path.claim_lead.lead,
        republish=path.config.republish,
    )
    try:
        waiting: Run = yield Write(decision)
    except ConflictError:
        return log_skip(run.id, SkipReason.CLAIM_LOST, path.worker_id, run)
    path.observer.delayed(waiting, "rate")
    if path.tasks.slots_for(run):
        yield PassSlotsOn(waiting)
    start, due = waiting.rate_start, waiting.due_at
    assert start is not None and due is not None
    log.info(
        "run %s waits for its rate limits' reserved start until %s",
        run.id,
        start.isoformat(),
        extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
    )
    if due - now <= MAX_HOLD and (yield Hold(message, due)):
        return Disposition.HELD
    if waiting.wake_at is not None:  # whole seconds, early: see EARLY_WAKEUP
        seconds = max(0, int((due - EARLY_WAKEUP - now).total_seconds()))
        with contextlib.suppress(RunlaneError):  # maintenance publishes it otherwise
            yield Publish(waiting, timedelta(seconds=seconds))
    return Disposition.SKIPPED
