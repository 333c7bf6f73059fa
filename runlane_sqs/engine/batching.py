"""Batched triggers: add their item to the pending run of their key, or create it
(:mod:`runlane_sqs.core.batches` has the rules; docs/batches.md the guide).

A trigger reads its key's record (one ``GetItem``): while it names a run that has not
started and has room, the trigger appends its item to it (one ``UpdateItem``). The
trigger whose item fills the run makes it due at once and sends its wakeup; one that
finds no room does the same for the run it found, then creates the key's next run with
its item, taking the key over (:func:`~runlane_sqs.engine.gathering.gather`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from runlane_sqs.core.batches import Append, Batch, due_of, fill
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import ConflictError, PayloadTooLarge
from runlane_sqs.core.machine import RepublishPolicy
from runlane_sqs.core.model import KeyKind, Run, RunEvent
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine.gathering import check_inline, create_with_key, gather
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.values import Prepared, Values
from runlane_sqs.ports.keys import KeyHolder
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs")


def open_batch(run: Run | None, key: str) -> bool:
    """Whether ``run`` is a batch of ``key`` that has not started: queued, no attempt."""
    return run is not None and run.not_started and run.batch_key == key


@dataclass(frozen=True)
class BatchedTrigger:
    """A checked trigger of a batched task: its key, its item (as the run's record keeps
    it), and the run it creates if its key has no batch with room
    (due ``max_age`` after the trigger, carrying the key)."""

    key: str
    item_text: str
    run: Run
    event: RunEvent
    prepared: Prepared
    """The item checked and encoded for ``run``: sealed again for the run it is
    appended to (an item opens only in the run it was sealed for)."""


class Batching:
    """The batched triggers of one app."""

    def __init__(
        self,
        *,
        store: RunStore,
        values: Values,
        clock: Clock,
        publisher: Publisher,
        republish: RepublishPolicy,
        inline_limit: int,
    ) -> None:
        self._store = store
        self._values = values
        self._clock = clock
        self._publisher = publisher
        self._republish = republish
        self._inline_limit = inline_limit

    def check_item(self, prepared: Prepared, item_text: str, rule: Batch) -> None:
        """An item is appended to its run's list with one write: it stays in the run's
        item (never in the payload bucket), within the batch's ``max_bytes``."""
        check_inline(prepared, "a batched trigger's item", self._inline_limit)
        size = len(item_text.encode("utf-8"))
        if size > rule.max_bytes:
            raise PayloadTooLarge(
                "a batched trigger's item (the batch's max_bytes bounds its items together)",
                size,
                rule.max_bytes,
            )

    def trigger(self, trigger: BatchedTrigger, rule: Batch) -> Run:
        """The run ``trigger``'s item goes to (its ``item`` says at which index): its
        key's pending batch, or its own new run."""
        return gather(
            self._store,
            self._clock,
            KeyKind.BATCH,
            trigger.run.task,
            trigger.key,
            join=lambda holder, now: self._append(trigger, rule, holder, now),
            join_again=lambda current: self._full(current, trigger.key),
            create=lambda previous: self._create(trigger, rule, previous),
        )

    def _append(
        self, trigger: BatchedTrigger, rule: Batch, holder: KeyHolder, now: datetime
    ) -> Run:
        text = self._item_for(trigger, holder.run_id)
        item = Append(holder.run_id, trigger.key, text, rule.size, rule.max_bytes, now)
        run = self._store.append_item(item)
        assert isinstance(run.payload, list)
        if len(run.payload) >= rule.size:
            self._fill(run, trigger.key)
        return self._added(run, len(run.payload) - 1)

    def _item_for(self, trigger: BatchedTrigger, run_id: str) -> str:
        """The trigger's item as the batch run ``run_id`` keeps it: sealed for it."""
        if not trigger.prepared.codecs:
            return trigger.item_text  # plain JSON, bound to no run
        place = ValuePlace(Holder.RUN, run_id, ValueField.ITEM)
        prepared = self._values.prepare_text(
            trigger.prepared.value, trigger.prepared.text, what="a batched item", place=place
        )
        return self._values.keep_inline(prepared).text

    def _full(self, current: Run | None, key: str) -> bool:
        """After a refused append: a batch that has not started is full or has no room
        for the item, so it starts now; the trigger then takes the key over (``False``:
        never append again)."""
        if open_batch(current, key):
            self._fill(current, key)
        return False

    def _create(self, trigger: BatchedTrigger, rule: Batch, previous: str | None) -> Run:
        run = trigger.run
        until = due_of(run.created_at, rule)
        new = (run, trigger.event, trigger.item_text)
        create_with_key(
            self._store, KeyKind.BATCH, trigger.key, new, until=until, previous=previous
        )
        return run.with_changes(item=0)

    def _fill(self, run: Run | None, key: str) -> None:
        """Make a batch that cannot take another item due now, and send its wakeup (best
        effort: without it the batch starts at its age)."""
        assert run is not None
        try:
            filled = self._store.fill_batch(
                fill(run.id, key, now=self._clock.now(), republish=self._republish)
            )
        except ConflictError:
            return  # another trigger filled it, or it started
        log.info(
            "batch run %s of %s is full (%d items): due now",
            filled.id,
            filled.task,
            filled.collapsed + 1,
            extra={"run_id": filled.id, "task": filled.task},
        )
        self._publisher.publish_new([filled])

    def _added(self, run: Run, index: int) -> Run:
        log.info(
            "trigger of %s added item %d to batch run %s",
            run.task,
            index,
            run.id,
            extra={"run_id": run.id, "task": run.task},
        )
        return self._values.open_run(run).with_changes(item=index)
