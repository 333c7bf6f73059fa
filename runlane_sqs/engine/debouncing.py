"""Debounced triggers: collapse into the pending run of their key, or create it
(:mod:`runlane_sqs.core.debounce` has the rules; docs/debounce.md the guide).

A trigger reads its key's record (one ``GetItem``): while it names a run that has not
started, the trigger collapses into it (one ``UpdateItem``; with a merge, the run is read
first and the write is conditioned on what the merge read). Otherwise it creates the
run and claims the key in one write, taking the key over from a run that started
(:func:`~runlane_sqs.engine.gathering.gather`).

On the per-message path, a wakeup sent before its run's key was triggered again finds
the run due later: the worker keeps its message until then, or publishes its wakeup
again for then (:func:`wait_for_quiet`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.debounce import Debounce, cap_of, collapse
from runlane_sqs.core.errors import ConflictError, RunlaneError
from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.machine import RepublishPolicy, SkipReason
from runlane_sqs.core.model import JSON, KeyKind, Run, RunEvent
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine.driver import MAX_HOLD, Disposition, Handling, Hold, Publish, WorkerIdentity
from runlane_sqs.engine.gathering import check_inline, create_with_key, gather
from runlane_sqs.engine.rates import EARLY_WAKEUP
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.keys import KeyHolder
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs")
worker_log = logging.getLogger("runlane_sqs.worker")
"""The per-message path's logger: where a worker says a run is debounced."""


def pending(run: Run | None, key: str) -> bool:
    """Whether ``run`` still takes collapses of ``key``: queued, never started."""
    return run is not None and run.not_started and run.debounce_key == key


@dataclass(frozen=True)
class DebouncedTrigger:
    """A checked trigger of a debounced task: its key, its payload, and the run it
    creates if its key has no pending run (due a quiet period after the trigger, carrying
    the key) with its first event and its payload as the run's record keeps it."""

    key: str
    payload: JSON
    run: Run
    event: RunEvent
    payload_text: str
    json_text: str
    """The payload's compact JSON: sealed again for the run it collapses into."""


class Debouncing:
    """The debounced triggers of one app."""

    def __init__(
        self,
        *,
        store: RunStore,
        values: Values,
        clock: Clock,
        republish: RepublishPolicy,
        inline_limit: int,
    ) -> None:
        self._store = store
        self._values = values
        self._clock = clock
        self._republish = republish
        self._inline_limit = inline_limit

    def trigger(self, trigger: DebouncedTrigger, rule: Debounce) -> Run:
        """The run ``trigger`` goes to: its key's pending run, collapsed into, or its own
        run, created with the key."""
        return gather(
            self._store,
            self._clock,
            KeyKind.DEBOUNCE,
            trigger.run.task,
            trigger.key,
            join=lambda holder, now: self._collapse(trigger, rule, holder, now),
            # a merge that lost to another collapse merges again
            join_again=lambda current: pending(current, trigger.key),
            create=lambda previous: self._create(trigger, rule, previous),
        )

    def _create(self, trigger: DebouncedTrigger, rule: Debounce, previous: str | None) -> Run:
        run = trigger.run
        until = cap_of(run.created_at, rule)
        new = (run, trigger.event, trigger.payload_text)
        create_with_key(
            self._store, KeyKind.DEBOUNCE, trigger.key, new, until=until, previous=previous
        )
        return run

    def _collapse(
        self, trigger: DebouncedTrigger, rule: Debounce, holder: KeyHolder, now: datetime
    ) -> Run:
        place = ValuePlace(Holder.RUN, holder.run_id, ValueField.PAYLOAD)  # sealed for it
        seen = None
        if rule.merge is None:
            prepared = self._values.prepare_text(
                trigger.payload, trigger.json_text, what="payload", place=place
            )
        else:
            current = self._store.get_run(holder.run_id)
            if current is None or not pending(current, trigger.key):
                raise ConflictError(holder.run_id, current)
            opened = self._values.open_run(current).payload
            merged: JSON = rule.merge(opened, trigger.payload)
            prepared = self._values.prepare(merged, what="merged payload", place=place)
            check_inline(prepared, "a debounced trigger's merged payload", self._inline_limit)
            seen = current.collapsed
        kept = self._values.keep(prepared).text
        run = self._store.collapse(
            collapse(
                holder.run_id,
                trigger.key,
                kept,
                now=now,
                cap=cap_of(holder.claimed_at, rule),
                rule=rule,
                republish=self._republish,
                seen=seen,
            )
        )
        log.info(
            "trigger of %s collapsed into run %s (debounce key %r, due %s)",
            run.task,
            run.id,
            trigger.key,
            run.due_at.isoformat() if run.due_at else None,
            extra={"run_id": run.id, "task": run.task},
        )
        return self._values.open_run(run)


def wait_for_quiet(run: Run, message: ReceivedWakeup, path: WorkerIdentity) -> Handling:
    """A debounced run whose key was triggered again after this wakeup was sent: its
    due time moved on. Up to :data:`~.driver.MAX_HOLD` ahead, the worker keeps the
    message until then; a later one has its wakeup published again for then (a moment
    early, in whole seconds, at most SQS's longest delay)."""
    assert run.due_at is not None
    now = path.clock.now()
    worker_log.info(
        "run %s is debounced until %s",
        run.id,
        run.due_at.isoformat(),
        extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
    )
    path.observer.skipped(SkipReason.NOT_DUE.value)
    if run.due_at - now <= MAX_HOLD and (yield Hold(message, run.due_at)):
        return Disposition.HELD
    seconds = int((run.due_at - EARLY_WAKEUP - now).total_seconds())
    with contextlib.suppress(RunlaneError):  # maintenance publishes it otherwise
        yield Publish(run, timedelta(seconds=min(MAX_DELAY_SECONDS, max(0, seconds))))
    return Disposition.SKIPPED
