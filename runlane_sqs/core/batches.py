"""Batches: a task's triggers with the same batch key accumulate as the items of one
run, which starts when it holds ``size`` items or ``max_age`` after its first item,
whichever comes first, and receives the list.

The first trigger of a key creates the run, due ``max_age`` later, with its item as the
first, and claims the key (a key record, as idempotency and singleton keys are claimed,
in the same write) until then. A later trigger reads the record and *appends* its item
(:class:`Append`): one conditional write adds it to the run's list, if the run has not
started and has room (fewer than ``size`` items, and its items' bytes stay within the
batch's byte limit). The trigger that fills the batch, or that finds no room for its
item in a run that has not started, makes the run due at once (:class:`Fill`) and sends
its wakeup; a trigger that finds no room then creates the key's next run, taking the
key over. So every item goes to exactly one run, and a run never holds more than
``size`` items (docs/batches.md).

An append adds no event; the run counts its items after the first in ``collapsed``, as
a debounced run counts its collapses, and a claim made on a read is conditioned on that
count (:mod:`runlane_sqs.core.debounce`).

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs.core.clock import Duration, to_timedelta, truncate_ms
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.limits import MAX_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.machine import RepublishPolicy, eager_wake_at

MAX_SIZE = 1000
"""Most items in one batch."""
LONGEST_AGE = timedelta(days=1)
MAX_BYTES = MAX_PAYLOAD_LIMIT_BYTES
"""The most bytes of a batch's items (their compact JSON, or their envelopes with
codecs): the run's item keeps them, beside its result and history."""

BatchKey = Callable[[Any], str]
"""Gives a trigger's batch key from its payload."""


@dataclass(frozen=True)
class Batch:
    """Gather a task's triggers with the same key as the items of one run: it starts
    with ``size`` items, or ``max_age`` after its first, and its handler receives the
    list of their payloads in the order they were added. ``key`` gives the key from the
    payload (a trigger's ``batch_key`` overrides it; without either, the task has one
    key). ``max_bytes`` bounds the items' total size (default and most: 128 KiB)."""

    size: int
    max_age: Duration
    key: BatchKey | None = None
    max_bytes: int = MAX_BYTES

    @property
    def age(self) -> timedelta:
        return to_timedelta(self.max_age, "batch max_age")


def check_batch(task: str, rule: object) -> Batch:
    """``rule`` as a task's batch, or :class:`ConfigurationError` naming ``task``."""
    if not isinstance(rule, Batch):
        raise ConfigurationError(f"task {task!r}: batch is a Batch, not {rule!r}")
    size, most = rule.size, rule.max_bytes
    if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_SIZE:
        raise ConfigurationError(
            f"task {task!r}: a batch's size is a whole number from 2 to {MAX_SIZE}, not {size!r}"
        )
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= MAX_BYTES:
        raise ConfigurationError(
            f"task {task!r}: a batch's max_bytes is from 1 to {MAX_BYTES}, not {most!r}"
        )
    try:
        age = rule.age
    except ConfigurationError as exc:
        raise ConfigurationError(f"task {task!r}: {exc}") from None
    if not timedelta(seconds=1) <= age <= LONGEST_AGE:
        raise ConfigurationError(
            f"task {task!r}: a batch's max_age is from 1 second to a day, not {age}"
        )
    if rule.key is not None and not callable(rule.key):
        raise ConfigurationError(f"task {task!r}: batch key is not callable")
    return rule


def due_of(first_at: datetime, rule: Batch) -> datetime:
    """When a batch first triggered at ``first_at`` starts if it does not fill first:
    ``max_age`` later. The key's claim ends then too (its record's expiry is in whole
    seconds, so the key is free within a second after)."""
    return truncate_ms(first_at + rule.age)


@dataclass(frozen=True, slots=True)
class Append:
    """One trigger adding its item to the pending run ``run_id`` of its key, if the run
    has not started, holds fewer than ``size`` items and has room for ``item_bytes``
    more within ``max_bytes``."""

    run_id: str
    key: str
    item_text: str
    """The item as the run's record keeps it (compact JSON, or an envelope)."""
    size: int
    max_bytes: int
    now: datetime

    @property
    def item_bytes(self) -> int:
        return len(self.item_text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class Fill:
    """A full batch (or one with no room for the next item) made due at ``now``, if it
    has not started and is due later."""

    run_id: str
    key: str
    now: datetime
    wake_at: datetime | None
    """When maintenance next looks at the run, as for a run triggered now and due now."""


def fill(run_id: str, key: str, *, now: datetime, republish: RepublishPolicy) -> Fill:
    now = truncate_ms(now)
    wake = eager_wake_at(now, now, republish)
    return Fill(run_id, key, now, truncate_ms(wake) if wake else None)
