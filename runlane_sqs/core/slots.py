"""Concurrency limits: slots that attempts hold, and runs that wait for one.

A limit has a *scope*: ``queue#{queue}`` (``app.queue(name, concurrency_limit=N)``,
every run on that queue) or ``key#{task}#{key}`` (a task's ``key_limit``, its runs with
the same concurrency key). Each scope has one slot record in storage whose *holders* are
the lease tokens of the attempts that hold one of its slots (``{token}:{run_id}``).

- A claim of a limited run takes its slots in the same atomic write that takes the lease,
  on condition that fewer than ``limit`` holders are listed (:class:`~runlane_sqs.core.
  machine.Transition`: :func:`slots_taken`).
- Every write that ends the attempt's lease (outcome, release, withdrawn claim, lease
  recovery, timeout, cancellation) removes its holders in the same write
  (:func:`slots_freed`), fenced on the run's lease token like the rest of the write.
- A claim that finds a scope full makes the run wait for it (:func:`wait_for_slot`): no
  attempt is counted, its wakeup is acknowledged, and it is listed on the waits index in
  creation order. The write that frees a slot wakes the oldest waiter
  (:func:`slot_freed`); maintenance wakes any others a free slot could take.

Nothing in this module performs I/O or reads a clock (docs/design/storage.md,
"Concurrency limits").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runlane_sqs.core import machine
from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.machine import RepublishPolicy, Transition
from runlane_sqs.core.model import JSON, EventType, Run, Slot
from runlane_sqs.core.names import check_key

QUEUE_SCOPE = "queue"
KEY_SCOPE = "key"
MAX_CONCURRENCY_KEY_CHARS = 200
"""A concurrency key's length limit (its scope is part of a DynamoDB key)."""
MAX_LIMIT = 10_000
"""The largest limit: every holder of a scope is listed in one item (400 KB)."""


def queue_scope(queue: str) -> str:
    return f"{QUEUE_SCOPE}#{queue}"


def key_scope(task: str, key: str) -> str:
    return f"{KEY_SCOPE}#{task}#{key}"


def check_limit(limit: object, what: str) -> int:
    """A concurrency limit: a whole number from 1 to :data:`MAX_LIMIT`."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ConfigurationError(f"{what} must be a whole number, not {limit!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"{what} must be from 1 to {MAX_LIMIT}, not {limit}")
    return limit


def check_concurrency_key(key: object) -> str:
    """A concurrency key as stored: like an idempotency key, at most
    :data:`MAX_CONCURRENCY_KEY_CHARS` characters."""
    return check_key("concurrency", key, MAX_CONCURRENCY_KEY_CHARS)


def slot_holder(token: str, run_id: str) -> str:
    """How a slot record lists the attempt holding one of its slots."""
    return f"{token}:{run_id}"


def holder_run(holder: str) -> tuple[str, str]:
    """``(lease token, run id)`` of a holder."""
    token, _, run_id = holder.partition(":")
    return token, run_id


def slots_taken(transition: Transition) -> tuple[Slot, ...]:
    """The slots a write takes: those of a claim that gives the run a new lease."""
    before, after = transition.before.lease, transition.after.lease
    if after is None or (before is not None and before.token == after.token):
        return ()
    return transition.after.slots


def slots_freed(transition: Transition) -> tuple[Slot, ...]:
    """The slots a write frees: those of the attempt whose lease it ends."""
    before, after = transition.before.lease, transition.after.lease
    if before is None or (after is not None and after.token == before.token):
        return ()
    return transition.before.slots


@dataclass(frozen=True, slots=True)
class SlotState:
    """A scope's slot record as stored."""

    scope: str
    limit: int
    """The limit of the last claim that took a slot (the code deployed then)."""
    holders: frozenset[str]
    listed_at: datetime | None = None
    """When maintenance looks at the record next (``None``: not listed)."""

    @property
    def free(self) -> int:
        return max(0, self.limit - len(self.holders))


def wait_for_slot(run: Run, slot: Slot, *, holders: int, now: datetime) -> Transition:
    """The claim of ``run`` found ``slot``'s scope full: the run waits, not due and not
    listed on the agenda, until a freed slot wakes it. Nothing about the attempt changes
    (no attempt or failure is counted)."""
    data: dict[str, JSON] = {"scope": slot.scope, "limit": slot.limit, "holders": holders}
    return machine.transition(
        run,
        truncate_ms(now),
        [(EventType.WAITING_FOR_SLOT, data)],
        None,
        slot_wait=slot.scope,
        due_at=None,
        wake_at=None,
        publishes=0,
    )


def slot_freed(run: Run, *, now: datetime, republish: RepublishPolicy) -> Transition | None:
    """Wake a run waiting for a slot: runnable and due at once; the caller publishes its
    wakeup (``wake_at`` covers a publish that is lost). ``None`` if it waits no more."""
    if run.slot_wait is None or not run.status.is_runnable:
        return None
    now = truncate_ms(now)
    return machine.transition(
        run,
        now,
        [(EventType.SLOT_FREED, {"scope": run.slot_wait})],
        None,
        slot_wait=None,
        due_at=now,
        wake_at=truncate_ms(republish.next_wake(now, 0)),
        publishes=0,
    )
