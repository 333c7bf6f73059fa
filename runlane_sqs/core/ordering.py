"""Ordered runs: the runs of one ordering key execute one at a time, in trigger order.

A trigger with an ``ordering_key`` takes the key's next number (its *place*) in the same
atomic write that creates the run. Storage keeps, per key, an *order record* (the next
number and how many of the key's runs are unfinished) and one *place entry* per
unfinished run, sorted by number. The unfinished run with the lowest number holds the
key's **turn**:

- a run triggered while none of the key's runs is unfinished holds the turn at once and
  is queued as any run;
- a run triggered behind unfinished ones *waits for its turn*: it is not due, no wakeup is
  published for it, and no claim can start it (:func:`place`);
- the run holding the turn keeps it through retries, releases and waits, until it
  finishes (succeeded, failed, cancelled); the write that makes it terminal removes its
  place entry (:func:`turn_passed`), and the next entry's run is woken
  (:func:`turn_reached`) by whoever wrote it, or by maintenance.

A run cancelled while it waits for its turn leaves the line the same way. Nothing in this
module performs I/O or reads a clock (docs/ordering.md, docs/design/storage.md "Ordered
runs").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.machine import RepublishPolicy, Transition
from runlane_sqs.core.model import EventType, Run, RunEvent
from runlane_sqs.core.names import check_key

ORDER_SCOPE = "order"
MAX_ORDERING_KEY_CHARS = 200
"""An ordering key's length limit (it is part of a DynamoDB key)."""
PLACE_DIGITS = 16
"""Places are written with this many digits, so entries sort by number."""
TURN_CHECK_AFTER = timedelta(seconds=30)
"""When a run of a key finishes, maintenance checks the key's turn this long after (the
writer hands the turn on at once; the check covers a writer that died in between)."""


def order_scope(key: str) -> str:
    """The scope of an ordering key: its order record is kept where slot records are."""
    return f"{ORDER_SCOPE}#{key}"


def is_order_scope(scope: str) -> bool:
    return scope.startswith(f"{ORDER_SCOPE}#")


def check_ordering_key(key: object) -> str:
    """An ordering key as stored: like an idempotency key, at most
    :data:`MAX_ORDERING_KEY_CHARS` characters."""
    return check_key("ordering", key, MAX_ORDERING_KEY_CHARS)


@dataclass(frozen=True, slots=True)
class OrderHead:
    """An ordering key's order record as read: the number the next trigger takes and how
    many of the key's runs are unfinished."""

    next_place: int = 0
    unfinished: int = 0


@dataclass(frozen=True, slots=True)
class Place:
    """What a trigger writes with its run: the key, the place it takes, and the order
    record it read (the write holds only if the record is still so)."""

    key: str
    seen: OrderHead

    @property
    def number(self) -> int:
        return self.seen.next_place


def place(run: Run, event: RunEvent, key: str, head: OrderHead) -> tuple[Run, RunEvent, Place]:
    """A new run of ``key`` at the head's next place: holding the turn if no run of the
    key is unfinished, else waiting for its turn (not due, nothing to publish)."""
    behind = head.unfinished
    data = {**event.data, "ordering_key": key, "place": head.next_place}
    if behind:
        data["behind"] = behind
        run = run.with_changes(turn_wait=True, due_at=None, wake_at=None, review_at=None)
    run = run.with_changes(ordering_key=key, place=head.next_place)
    return run, RunEvent(event.seq, event.type, event.at, event.attempt, data), Place(key, head)


def turn_passed(transition: Transition) -> str | None:
    """The ordering key whose line a write leaves: that of an ordered run it makes
    terminal (``None`` for every other write)."""
    before, after = transition.before, transition.after
    if after.ordering_key is None or before.is_terminal or not after.is_terminal:
        return None
    return after.ordering_key


def turn_reached(run: Run, *, now: datetime, republish: RepublishPolicy) -> Transition | None:
    """Wake a run whose turn came: runnable and due at once; the caller publishes its
    wakeup (``wake_at`` covers a publish that is lost). ``None`` if it does not wait for
    its turn (it was woken already, or cancelled)."""
    if not run.turn_wait or not run.status.is_runnable:
        return None
    now = truncate_ms(now)
    return machine.transition(
        run,
        now,
        [(EventType.TURN_REACHED, {"ordering_key": run.ordering_key, "place": run.place})],
        None,
        turn_wait=False,
        due_at=now,
        wake_at=truncate_ms(republish.next_wake(now, 0)),
        publishes=0,
    )
