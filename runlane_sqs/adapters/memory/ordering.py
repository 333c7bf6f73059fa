"""Ordering keys in memory, for tests: the same conditions as DynamoDB.

The run store takes a place inside its trigger write and leaves the line inside the
write that makes an ordered run terminal (:meth:`take_place`, :meth:`leave`, under the
run store's lock), as the DynamoDB store does in one transaction. An order record is
listed for maintenance on the slot agenda, where DynamoDB keeps it beside slot records.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from runlane_sqs.adapters.memory.slots import InMemorySlotStore
from runlane_sqs.core.errors import OrderMoved
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.ordering import TURN_CHECK_AFTER, OrderHead, Place, order_scope, turn_passed


@dataclass
class _Line:
    head: OrderHead = field(default_factory=OrderHead)
    places: dict[int, str] = field(default_factory=dict)


class InMemoryOrderStore:
    """Order records and place entries in a dict, guarded by the run store's lock."""

    def __init__(self, lock: threading.Lock, slots: InMemorySlotStore) -> None:
        self._lock = lock
        self._slots = slots
        self._lines: dict[str, _Line] = {}

    def take_place(self, run: Run, place: Place) -> None:
        """Take a trigger's place, or raise :class:`OrderMoved` and change nothing (the
        caller holds the lock, has checked the rest of the trigger and writes the run)."""
        line = self._lines.get(place.key) or _Line()
        if line.head != place.seen:
            raise OrderMoved(place.key)
        self._lines[place.key] = line
        line.head = OrderHead(place.seen.next_place + 1, place.seen.unfinished + 1)
        line.places[place.number] = run.id

    def leave(self, transition: Transition) -> None:
        """The line change of a write that makes an ordered run terminal (the caller
        holds the lock and has checked the run's own condition)."""
        key = turn_passed(transition)
        if key is None:
            return
        after = transition.after
        line = self._lines.setdefault(key, _Line())
        if after.place is not None:
            line.places.pop(after.place, None)
        line.head = OrderHead(line.head.next_place, line.head.unfinished - 1)
        self._slots.list_scope(order_scope(key), after.updated_at + TURN_CHECK_AFTER)

    def order_head(self, key: str) -> OrderHead:
        with self._lock:
            line = self._lines.get(key)
            return line.head if line else OrderHead()

    def first_place(self, key: str) -> tuple[int, str] | None:
        with self._lock:
            line = self._lines.get(key)
            if line is None or not line.places:
                return None
            number = min(line.places)
            return number, line.places[number]

    def unlist_order(self, key: str, listed_at: datetime) -> None:
        self._slots.unlist_scope(order_scope(key), listed_at)
