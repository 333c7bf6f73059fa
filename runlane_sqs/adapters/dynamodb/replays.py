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

from runlane_sqs.adapters.dynamodb.runs import (
    event_to_wire,
    events_from_item,
    item_from_wire,
    run_from_wire,
    run_state_attributes,
)
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.errors import ConflictError
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Run, RunEvent

log = logging.getLogger("runlane_sqs.storage")


def _stored_form(event: RunEvent) -> tuple[object, ...]:
    """What storage keeps of an event (its time in whole milliseconds)."""
    return (event.seq, event.type, to_epoch_ms(event.at), event.attempt, event.data)


def _same_events(stored: list[RunEvent], ours: tuple[RunEvent, ...]) -> bool:
    tail = stored[-len(ours) :] if ours else []
    return [_stored_form(e) for e in tail] == [_stored_form(e) for e in ours]


def _by_the_attempt(transition: Transition) -> bool:
    """A claim (it writes a new, random lease token), an attempt's own write (fenced on
    its token) or a run put to sleep for the start its worker has just reserved under its
    rate limits (the start is that worker's reservation): only that worker can have
    written that state. Other writes (an operator's, maintenance's recoveries) may be
    made identically by a second writer, so their refusal stays a conflict.

    Two workers' reservations can share a start's millisecond: the second then takes the
    first's write for its own, and the run gets one more wakeup, which its claim's
    condition makes harmless."""
    before, after = transition.before.lease, transition.after.lease
    if after is not None and (before is None or before.token != after.token):
        return True
    reserved = transition.after.rate_start
    if reserved is not None and reserved != transition.before.rate_start:
        return True
    return transition.fence is not None and not transition.recovery


def landed_transition(transition: Transition, wire: dict[str, Any] | None) -> Run | None:
    """The stored run if it is ``transition.after`` already written by this attempt:
    a claim or a write fenced on the attempt's lease token, with the same sequence, the
    same state (lease token included) and, last in its history, the same events; else
    ``None`` (another writer changed the run)."""
    if not wire or not _by_the_attempt(transition):
        return None
    stored = run_from_wire(wire)
    after = transition.after
    if stored.seq != after.seq or run_state_attributes(stored) != run_state_attributes(after):
        return None
    if not _same_events(events_from_item(item_from_wire(wire)), transition.events):
        return None
    log.info(
        "run %s: a write refused on resending was our own, already applied (its first "
        "response was lost); carrying on",
        after.id,
        extra={"run_id": after.id, "seq": after.seq},
    )
    return stored.with_changes(created=False)


def landed_creation(
    run: Run, event: RunEvent, payload_text: str, wire: dict[str, Any] | None
) -> bool:
    """Whether a refused ``PutItem`` of a new run found that very run already stored:
    our run id (random), our payload, our creation time and our first event, so only our
    own earlier put can have written it (a worker may have claimed the run since). A
    schedule occurrence's run id is not random: its first event names the maintenance
    pass that created it (``pass``), so another pass creating it in the same millisecond
    is told apart."""
    if not wire or wire.get("run_id", {}).get("S") != run.id:
        return False
    if wire.get("payload", {}).get("S") != payload_text:
        return False
    if wire.get("created_at", {}).get("N") != str(to_epoch_ms(run.created_at)):
        return False
    stored_events = wire.get("events", {}).get("L") or [{}]
    if stored_events[0] != event_to_wire(event):
        return False
    log.info(
        "run %s: its creation was refused on resending because it had already been "
        "stored (the first response was lost); carrying on",
        run.id,
        extra={"run_id": run.id},
    )
    return True


def landed_claim(claim: HintedClaim, stored: Run | None) -> bool:
    """Whether a refused hinted claim is our own, already applied: the stored run carries
    its random lease token at the sequence it wrote."""
    if stored is None or stored.lease is None or stored.lease.token != claim.token:
        return False
    if stored.seq != claim.hint.seq + 1:
        return False
    log.info(
        "run %s: a claim refused on resending was our own, already applied (its first "
        "response was lost); carrying on",
        stored.id,
        extra={"run_id": stored.id, "seq": stored.seq},
    )
    return True


def refused_transition(transition: Transition, stored: dict[str, Any] | None) -> Run:
    """After a refused transition, given the item the refusal found: the stored run if
    it shows the transition itself already applied (a resent write whose first response
    was lost); else raise a :class:`ConflictError` carrying the stored run."""
    landed = landed_transition(transition, stored)
    if landed is not None:
        return landed
    raise ConflictError(transition.run_id, run_from_wire(stored) if stored else None)


def refused_claim(claim: HintedClaim, stored: dict[str, Any] | None) -> Run:
    """After a refused hinted claim, given the item the refusal found: the stored run if
    it shows the claim itself already applied; else raise a :class:`ConflictError`
    carrying the stored run (``None`` when there is none)."""
    current = run_from_wire(stored) if stored else None
    if landed_claim(claim, current):
        assert current is not None
        return current
    raise ConflictError(claim.run_id, current)
