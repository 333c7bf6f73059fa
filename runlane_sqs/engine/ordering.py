"""Handing an ordering key's turn on: waking the run whose turn came.

The decisions are in :mod:`runlane_sqs.core.ordering`. The write that makes an ordered
run terminal leaves its key's line (inside the run store's write) and lists the key's
order record for maintenance; then:

- the writer hands the turn on at once (:meth:`Turns.hand_on`, from the finisher): the
  run at the lowest place left in the line is woken if it waits for its turn, and its
  wakeup published;
- maintenance checks each order record listed on the agenda (:meth:`Turns.check`): it
  hands the turn on the same way (a writer that died between its write and the wake) and
  takes the record off the agenda.

Handing on is idempotent: the run at the head of the line either waits for its turn
(woken once, by a conditional write) or holds it already.
"""

from __future__ import annotations

import logging
from datetime import datetime

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError
from runlane_sqs.core.model import Run
from runlane_sqs.core.ordering import ORDER_SCOPE, turn_reached
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.ordering")


class Turns:
    """Wakes the run whose turn came in an ordering key's line."""

    def __init__(
        self, store: RunStore, publisher: Publisher, clock: Clock, config: RunlaneConfig
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._clock = clock
        self._config = config

    def hand_on(self, key: str) -> Run | None:
        """Wake the run at the head of ``key``'s line if it waits for its turn, and
        publish its wakeup; returns it (``None``: nobody had to be woken)."""
        woken = self._wake_head(key)
        if woken is not None:
            self._publisher.publish_many([woken])
        return woken

    def check(self, scope: str, listed_at: datetime) -> Run | None:
        """Maintenance's look at a listed order record: wake the run at the head of the
        line if it waits for its turn (the caller publishes its wakeup), then take the
        record off the agenda (unless a later finish listed it again)."""
        key = scope.removeprefix(f"{ORDER_SCOPE}#")
        woken = self._wake_head(key)
        self._store.orders.unlist_order(key, listed_at)
        return woken

    def _wake_head(self, key: str) -> Run | None:
        head = self._store.orders.first_place(key)
        if head is None:
            return None
        place, run_id = head
        run = self._store.get_run(run_id)
        if run is None:
            log.warning(
                "run %s at place %d of ordering key %r is not stored",
                run_id,
                place,
                key,
                extra={"run_id": run_id, "ordering_key": key},
            )
            return None
        decision = turn_reached(run, now=self._clock.now(), republish=self._config.republish)
        if decision is None:
            return None
        try:
            woken = self._store.apply(decision)
        except ConflictError:  # woken by another hand-on, or cancelled, meanwhile
            return None
        log.info(
            "run %s reached its turn (place %d of ordering key %r)",
            woken.id,
            place,
            key,
            extra={"run_id": woken.id, "task": woken.task, "ordering_key": key},
        )
        return woken
