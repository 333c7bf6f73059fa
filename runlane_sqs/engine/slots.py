"""Waking runs that wait for a concurrency slot, and checking slot records.

The decisions are in :mod:`runlane_sqs.core.slots`. A claim that finds its scope full
makes the run wait (the per-message path, :mod:`runlane_sqs.engine.message`); then:

- the write that frees a slot (an attempt's end, a recovered lease) is followed by
  :meth:`SlotWaker.wake`, which wakes the oldest waiter of each freed scope;
- the run that just began waiting is checked once more (:meth:`SlotWaker.recheck`): a
  slot freed between its refused claim and its write would otherwise wake nobody;
- maintenance checks each slot record listed on the agenda (:meth:`SlotWaker.check`):
  it drops holders whose attempt no longer holds its lease (a slot never leaks) and
  wakes as many waiters as there are free slots under the app's current limit (all of
  them, a hundred a pass, once a deploy removed the limit).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError, RunlaneError
from runlane_sqs.core.machine import SkipReason
from runlane_sqs.core.model import LEASED_STATUSES, Run, Slot
from runlane_sqs.core.slots import SlotState, holder_run, slot_freed, wait_for_slot
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.driver import (
    Disposition,
    EngineCall,
    Handling,
    WorkerIdentity,
    Write,
    log_skip,
)
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.slots")
worker_log = logging.getLogger("runlane_sqs.worker")
"""The per-message path's logger: where a worker says a run waits for a slot."""
SPARE_WAITERS = 4
"""Waiters read beyond those to wake: the waits index lags writes by a moment, so an
entry may name a run that was woken already."""
UNLIMITED_WAKES = 100
"""Waiters one check wakes in a scope that this app's code no longer limits (a deploy
removed the limit): the rest at the next pass."""


@dataclass(frozen=True, slots=True)
class WakeWaiters(EngineCall):
    """Slots of these scopes were just freed: wake the oldest run waiting for each
    (:meth:`SlotWaker.wake`). Result: ``None``."""

    scopes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecheckSlot(EngineCall):
    """``run`` just began waiting for ``slot``: wake it if a slot is free by now
    (:meth:`SlotWaker.recheck`). Result: ``None``."""

    run: Run
    slot: Slot


@dataclass(frozen=True, slots=True)
class PassSlotsOn(EngineCall):
    """``run`` sleeps until its reserved start instead of taking its slots: wake the
    oldest waiter of each of its limits that has a free slot (``run`` may have been woken
    for it; :meth:`SlotWaker.pass_on`). Result: ``None``."""

    run: Run


def wait_for_free_slot(run: Run, slot: Slot, holders: int, path: WorkerIdentity) -> Handling:
    """Every slot of ``slot``'s scope is held: the run waits, with no attempt counted,
    and its wakeup is acknowledged; the write that frees a slot wakes the oldest
    waiter (docs/concurrency.md). The run is checked once more after its write, in
    case the slot freed in between."""
    now = path.clock.now()
    try:
        waiting: Run = yield Write(wait_for_slot(run, slot, holders=holders, now=now))
    except ConflictError:
        return log_skip(run.id, SkipReason.CLAIM_LOST, path.worker_id, run)
    path.observer.delayed(waiting, "slot")
    worker_log.info(
        "run %s waits for a slot of %s (%d of %d held)",
        run.id,
        slot.scope,
        holders,
        slot.limit,
        extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
    )
    with contextlib.suppress(RunlaneError):  # maintenance checks the slot record too
        yield RecheckSlot(waiting, slot)
    return Disposition.SKIPPED


def wake_waiters(run: Run, ctx: TaskContext) -> Generator[WakeWaiters, Any, None]:
    """The attempt's end freed ``run``'s slots: wake the oldest waiter of each scope
    (what this misses, maintenance wakes)."""
    try:
        yield WakeWaiters(tuple(s.scope for s in run.slots))
    except RunlaneError as exc:
        ctx.log.warning("waking runs waiting for a slot failed: %s", exc)


@dataclass(frozen=True, slots=True)
class SlotCheck:
    """What maintenance's look at one slot record did."""

    repaired: int
    """Holders dropped: their attempt no longer held its lease."""
    woken: list[Run]
    """Waiters woken for free slots (their wakeups still to publish)."""


class SlotWaker:
    """Makes runs waiting for a slot runnable again and publishes their wakeups."""

    def __init__(
        self,
        store: RunStore,
        publisher: Publisher,
        clock: Clock,
        config: RunlaneConfig,
        tasks: TaskRegistry,
    ) -> None:
        self._tasks = tasks
        self._store = store
        self._publisher = publisher
        self._clock = clock
        self._config = config

    def wake(self, scopes: Iterable[str]) -> int:
        """Wake the oldest waiter of each scope (one slot of each just freed)."""
        woken = [run for scope in scopes for run in self._wake_oldest(scope, 1)]
        if woken:
            self._publisher.publish_many(woken)
        return len(woken)

    def recheck(self, run: Run, slot: Slot) -> Run | None:
        """After ``run`` began waiting for ``slot``: wake it at once if its scope has a
        free slot by now (the write that freed it may have found no waiter). A free
        slot of its other limits, which it could not use, is passed on to the oldest
        waiter there (the slot it was woken for, or one freed while it claimed)."""
        woken: Run | None = None
        state = self._store.slots.get_slot(slot.scope)
        if state is None or len(state.holders) < slot.limit:
            woken = self._wake_run(run)
        passed = self._passed_on(run, but=slot.scope)
        ready = ([woken] if woken is not None else []) + passed
        if ready:
            self._publisher.publish_many(ready)
        return woken

    def pass_on(self, run: Run) -> int:
        """``run`` will not take its slots now (it sleeps until its reserved start under
        its rate limits): a free slot of each of its limits goes to the oldest waiter
        there (it may have been woken for that slot). Returns how many were woken."""
        passed = self._passed_on(run)
        if passed:
            self._publisher.publish_many(passed)
        return len(passed)

    def _passed_on(self, run: Run, but: str | None = None) -> list[Run]:
        return [
            waiter
            for other in self._tasks.slots_for(run)
            if other.scope != but and self._full(other) is None
            for waiter in self._wake_oldest(other.scope, 1)
        ]

    def check(self, listed: SlotState, now: datetime) -> SlotCheck:
        """Maintenance's look at a listed slot record: drop leaked holders, wake waiters
        that free slots can take, and list the record again (or take it off the agenda
        once nothing holds or waits)."""
        state = self._store.slots.get_slot(listed.scope) or listed
        repaired = 0
        live = set(state.holders)
        for holder in state.holders:
            token, run_id = holder_run(holder)
            run = self._store.get_run(run_id)
            if _holds(run, token):
                continue
            live.discard(holder)
            if self._store.slots.drop_holder(state.scope, holder):
                repaired += 1
                log.warning(
                    "slot of %s held by run %s without its lease; freed",
                    state.scope,
                    run_id,
                    extra={"run_id": run_id, "scope": state.scope},
                )
        known, limit = self._tasks.scope_limit(state.scope)
        if known and limit is None:  # no longer limited: wake the waiters, 100 a pass
            woken = self._wake_oldest(state.scope, UNLIMITED_WAKES)
            again = len(woken) == UNLIMITED_WAKES
        else:
            free = max(0, (limit if known and limit else state.limit) - len(live))
            woken = self._wake_oldest(state.scope, free) if free else []
            again = False
        waiting = bool(woken) or bool(self._store.slots.slot_waiters(state.scope, 1))
        if again or live or waiting:
            later = now if again else now + self._config.lease_duration
            self._store.slots.relist_slot(state.scope, later)
        else:
            self._store.slots.relist_slot(state.scope, None)
        return SlotCheck(repaired=repaired, woken=woken)

    def _wake_oldest(self, scope: str, count: int) -> list[Run]:
        """Wake up to ``count`` of the oldest waiters of ``scope`` that can take a slot
        of each of their limits now; one whose other limit is full waits for that one
        instead (its place in that line is its age), so a free slot never goes to a run
        that cannot use it."""
        woken: list[Run] = []
        for run_id in self._store.slots.slot_waiters(scope, count + SPARE_WAITERS):
            if len(woken) >= count:
                break
            run = self._store.get_run(run_id)
            if run is None or run.slot_wait != scope:
                continue
            blocked = next(
                (
                    (other, full)
                    for other in self._tasks.slots_for(run)
                    if other.scope != scope and (full := self._full(other)) is not None
                ),
                None,
            )
            if blocked is not None:
                self._wait_elsewhere(run, *blocked)
                continue
            stored = self._wake_run(run)
            if stored is not None:
                woken.append(stored)
        return woken

    def _full(self, slot: Slot) -> int | None:
        """How many hold ``slot``'s scope when it is full (``None``: a slot is free)."""
        state = self._store.slots.get_slot(slot.scope)
        held = len(state.holders) if state is not None else 0
        return held if held >= slot.limit else None

    def _wait_elsewhere(self, run: Run, slot: Slot, holders: int) -> None:
        """``run`` waits for ``slot``'s full scope instead of the one it was listed in."""
        decision = wait_for_slot(run, slot, holders=holders, now=self._clock.now())
        try:
            self._store.apply(decision)
        except ConflictError:  # woken or cancelled meanwhile
            return
        log.info(
            "run %s waits for a slot of %s (the slot of %s it waited for is free)",
            run.id,
            slot.scope,
            run.slot_wait,
            extra={"run_id": run.id, "task": run.task},
        )

    def _wake_run(self, run: Run) -> Run | None:
        decision = slot_freed(run, now=self._clock.now(), republish=self._config.republish)
        if decision is None:
            return None
        try:
            return self._store.apply(decision)
        except ConflictError:  # woken by another free, or cancelled, meanwhile
            return None


def _holds(run: Run | None, token: str) -> bool:
    return (
        run is not None
        and run.status in LEASED_STATUSES
        and run.lease is not None
        and run.lease.token == token
    )
