"""A conditional write refused because it had already landed.

When the network drops a write's response after DynamoDB applied it, botocore (or the
worker's own retry) sends the same request again, and its condition now fails against
the state that write itself produced. The refusal returns the stored item
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``); this module tells whether that item
is our own write, so the caller carries on as if the first response had arrived instead
of mistaking it for another writer's (docs/design/storage.md, "Lost responses").
"""

from __future__ import annotations

import logging
from typing import Any

from runlane_sqs.adapters.dynamodb.codec import (
    events_from_item,
    item_from_wire,
    run_from_item,
    run_state_attributes,
)
from runlane_sqs.core.durations import to_epoch_ms
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, RunEvent

log = logging.getLogger("runlane_sqs.storage")


def _stored_form(event: RunEvent) -> tuple[object, ...]:
    """What storage keeps of an event (its time in whole milliseconds)."""
    return (event.seq, event.type, to_epoch_ms(event.at), event.attempt, event.data)


def _same_events(stored: list[RunEvent], ours: tuple[RunEvent, ...]) -> bool:
    tail = stored[-len(ours) :] if ours else []
    return [_stored_form(e) for e in tail] == [_stored_form(e) for e in ours]


def landed_transition(transition: Transition, wire: dict[str, Any] | None) -> Run | None:
    """The stored run if it is ``transition.after`` already written: the same sequence,
    the same state (lease token included) and, last in its history, the same events;
    else ``None`` (another writer changed the run)."""
    if not wire:
        return None
    item = item_from_wire(wire)
    stored = run_from_item(item)
    after = transition.after
    if stored.seq != after.seq or run_state_attributes(stored) != run_state_attributes(after):
        return None
    if not _same_events(events_from_item(item), transition.events):
        return None
    log.info(
        "run %s: a write refused on resending was our own, already applied (its first "
        "response was lost); carrying on",
        after.id,
        extra={"run_id": after.id, "seq": after.seq},
    )
    return stored.with_changes(created=False)


def landed_creation(run: Run, wire: dict[str, Any] | None) -> bool:
    """Whether a refused ``PutItem`` of a new run found that run already stored: run ids
    are random, so an item with ours can only be our own earlier put (a worker may have
    claimed it since)."""
    if not wire or wire.get("run_id", {}).get("S") != run.id:
        return False
    log.info(
        "run %s: its creation was refused on resending because it had already been "
        "stored (the first response was lost); carrying on",
        run.id,
        extra={"run_id": run.id},
    )
    return True
