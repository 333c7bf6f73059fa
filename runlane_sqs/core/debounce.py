"""Debounce: triggers of a task with the same debounce key within a quiet period collapse
into one run, which starts once the key has been quiet that long, with the last payload
(or the payloads merged), and no later than a maximum wait after its first trigger.

The first trigger of a key creates the run, due a quiet period later, and claims the
key (a key record, as idempotency and singleton keys are claimed, in the same write).
The record's expiry is the run's *cap*: its first trigger plus the maximum wait. A later
trigger reads the record and *collapses* into the run (:class:`Collapse`): one
conditional write replaces the run's payload and moves its due time to the quiet period
after this trigger, never past the cap. The write holds only while the run has not
started (queued, no attempt): a run that started, was cancelled or was parked takes no
more triggers, and the next trigger creates a new run that takes the key over. From the
cap on, the key is free and a trigger starts a new run: a constant stream of triggers
still runs once per maximum wait (docs/debounce.md).

A collapse appends no event (a key triggered ten thousand times must not grow its run's
history past an item's size); the run counts them in ``collapsed``. A claim made on a
read of the run is conditioned on that count too, so an attempt never starts on a payload
that a collapse replaced after the read. A claim on a wakeup's hint returns the stored
run, payload included.

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs.core.clock import Duration, to_timedelta, truncate_ms
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.machine import RepublishPolicy, eager_wake_at
from runlane_sqs.core.model import Run

TASK_WIDE_KEY = "*"
"""The debounce (or batch) key of a trigger whose task's :class:`Debounce` (or
:class:`~runlane_sqs.core.batches.Batch`) has no ``key`` function and that gives no key
of its own: every such trigger of the task shares it."""
DEFAULT_WAIT_FACTOR = 10
"""Without a ``max_wait``, a run waits at most this many quiet periods."""
LONGEST_WAIT = timedelta(days=7)
"""The longest ``max_wait``: a key record's claim ends at the cap."""

DebounceKey = Callable[[Any], str]
"""Gives a trigger's debounce key from its payload."""
Merge = Callable[[Any, Any], Any]
"""Gives the pending run's new payload from its current one and the trigger's."""


@dataclass(frozen=True)
class Debounce:
    """Collapse a task's triggers with the same key into one run that starts after
    ``quiet`` without another trigger of the key, at most ``max_wait`` after the first
    (default ten quiet periods). ``key`` gives the key from the payload (a trigger's
    ``debounce_key`` overrides it; without either, the task has one key); ``merge``, if
    given, makes the run's payload from its current one and each new one (default: the
    last payload wins)."""

    quiet: Duration
    max_wait: Duration | None = None
    key: DebounceKey | None = None
    merge: Merge | None = None

    @property
    def quiet_period(self) -> timedelta:
        return to_timedelta(self.quiet, "debounce quiet")

    @property
    def longest_wait(self) -> timedelta:
        if self.max_wait is None:
            return self.quiet_period * DEFAULT_WAIT_FACTOR
        return to_timedelta(self.max_wait, "debounce max_wait")


def check_debounce(task: str, rule: object) -> Debounce:
    """``rule`` as a task's debounce, or :class:`ConfigurationError` naming ``task``."""
    if not isinstance(rule, Debounce):
        raise ConfigurationError(f"task {task!r}: debounce is a Debounce, not {rule!r}")
    try:
        quiet, longest = rule.quiet_period, rule.longest_wait
    except ConfigurationError as exc:
        raise ConfigurationError(f"task {task!r}: {exc}") from None
    if quiet < timedelta(seconds=1):
        raise ConfigurationError(
            f"task {task!r}: a debounce's quiet period is at least 1 second (wakeups are "
            f"delayed in whole seconds), not {quiet}"
        )
    if not quiet <= longest <= LONGEST_WAIT:
        raise ConfigurationError(
            f"task {task!r}: a debounce's max_wait is from its quiet period ({quiet}) to "
            f"{LONGEST_WAIT.days} days, not {longest}"
        )
    for name in ("key", "merge"):
        value = getattr(rule, name)
        if value is not None and not callable(value):
            raise ConfigurationError(f"task {task!r}: debounce {name} is not callable")
    return rule


def cap_of(first_at: datetime, rule: Debounce) -> datetime:
    """The latest due time of a run first triggered at ``first_at``: the maximum wait
    after it. The key's claim ends then too (its record's expiry is in whole seconds, so
    the key is free within a second after)."""
    return truncate_ms(first_at + rule.longest_wait)


def due_after(now: datetime, cap: datetime, rule: Debounce) -> datetime:
    """When a run of a key last triggered at ``now`` is due: a quiet period later, never
    past its ``cap``."""
    return truncate_ms(min(now + rule.quiet_period, cap))


@dataclass(frozen=True, slots=True)
class Collapse:
    """One trigger collapsing into the pending run ``run_id`` of its key: the run's new
    payload (as its record keeps it) and due time, if the run has still not started and
    (with a merge) still holds the ``seen`` collapses it was merged with."""

    run_id: str
    key: str
    payload_text: str
    due_at: datetime
    wake_at: datetime | None
    """When maintenance next looks at the run (``None``: at its due time), as for a run
    triggered now with that due time."""
    now: datetime
    seen: int | None = None
    """The run's ``collapsed`` count the merge read (``None``: no merge, any count)."""


def collapse(
    run_id: str,
    key: str,
    payload_text: str,
    *,
    now: datetime,
    cap: datetime,
    rule: Debounce,
    republish: RepublishPolicy,
    seen: int | None = None,
) -> Collapse:
    """The collapse of a trigger at ``now`` into the run of its key capped at ``cap``."""
    now = truncate_ms(now)
    due = due_after(now, cap, rule)
    wake = eager_wake_at(due, now, republish)
    return Collapse(
        run_id=run_id,
        key=key,
        payload_text=payload_text,
        due_at=due,
        wake_at=truncate_ms(wake) if wake else None,
        now=now,
        seen=seen,
    )


def collapsed_since(read: Run, current: Run | None) -> bool:
    """Whether a claim decided on ``read`` was refused because a trigger went to the
    debounced (or batch) run since: it is the same unstarted run, with more triggers."""
    return (
        current is not None
        and (read.debounce_key is not None or read.batch_key is not None)
        and current.seq == read.seq
        and current.collapsed > read.collapsed
    )
