"""Concurrency limits in DynamoDB: one slot record per scope, taken and freed in the
transaction that writes the run (docs/design/storage.md, "Concurrency limits"); the same
transaction leaves an ordered run's line when it finishes
(:mod:`runlane_sqs.adapters.dynamodb.ordering`).

A slot record (``SLOT#{env}#{scope}`` / ``SLOT``) lists its holders in a string set,
``{lease token}:{run id}`` each. A claim of a limited run is one ``TransactWriteItems``:
the run's claim ``Update`` and, per scope, ``ADD holders :holder`` on condition that
``attribute_not_exists(holders) OR size(holders) < :limit`` (an empty set is removed by
DynamoDB, so the first condition covers a free record). A write that ends the attempt's
lease is the run's ``Update`` and ``DELETE holders :holder`` per scope, unconditioned:
the run's own condition (its sequence and lease token) fences the whole transaction.
The same transaction counts the references to objects of the payload bucket a write
stores (:mod:`runlane_sqs.adapters.dynamodb.objects`). Writes of runs without limits or
large values stay single ``UpdateItem`` requests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import Query, agenda_key, every_page, waits_key
from runlane_sqs.adapters.dynamodb.errors import (
    Refused,
    Send,
    cancellation_reasons,
    conflicted,
)
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import SlotItem
from runlane_sqs.adapters.dynamodb.keys import slot_agenda_pk
from runlane_sqs.adapters.dynamodb.objects import hold_items, refused_holds
from runlane_sqs.adapters.dynamodb.ordering import finish_items
from runlane_sqs.adapters.dynamodb.replays import landed_transition
from runlane_sqs.adapters.dynamodb.requests import Request, query_agenda
from runlane_sqs.adapters.dynamodb.runs import (
    Beside,
    query_waiters,
    run_from_wire,
    transition_write,
)
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import ConflictError, NoFreeSlot, StorageUnavailable
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, Slot
from runlane_sqs.core.slots import SlotState, slot_holder
from runlane_sqs.core.values import moved_record

TRANSACTION_ATTEMPTS = 8
"""Sends of one transaction that DynamoDB cancels for a conflicting transaction on the
same slot record (``TransactionConflict``) before it counts as unavailable."""
CONFLICT_FIRST_WAIT_SECONDS = 0.01
"""Wait before sending a conflicted transaction again, doubled each time."""


class Contended(Exception):
    """DynamoDB cancelled the transaction for another one on the same items: nothing
    was written, so the same transaction may be sent again."""


def _take(
    table: str, environment: str, slot: Slot, holder: str, now_ms: int, at_ms: int
) -> Request:
    x = Expressions(SlotItem)
    x.add("holders", {holder})
    limit = x.value(slot.limit)
    x.set("slot_limit", limit)
    x.set("environment", environment)
    x.set("scope", slot.scope)
    x.set("updated_at", now_ms)
    x.set("agenda_pk", slot_agenda_pk(environment, slot.scope))
    x.set("agenda_at", x.if_not_exists("agenda_at", at_ms))
    x.require(x.either(x.absent("holders"), x.compare(x.size("holders"), "<", limit)))
    return x.request(
        {
            "TableName": table,
            "Key": keys.slot_key(environment, slot.scope),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def _free(table: str, environment: str, slot: Slot, holder: str, now_ms: int) -> Request:
    x = Expressions(SlotItem)
    x.delete("holders", {holder})
    x.set("updated_at", now_ms)
    x.set("environment", environment)
    x.set("scope", slot.scope)
    return x.request({"TableName": table, "Key": keys.slot_key(environment, slot.scope)})


def transaction(table: str, transition: Transition, beside: Beside) -> Request:
    """The ``TransactWriteItems`` of a transition that writes items ``beside`` the run's
    own (:func:`~.runs.beside_the_run`): slots it takes or frees, the line of an ordered
    run it ends, the records of objects its values reference. The run's update comes
    first, then the slots taken, freed, the line left and the references counted."""
    taken, freed, holds = beside.taken, beside.freed, beside.holds
    after, before = transition.after, transition.before
    write = transition_write(transition)  # a transaction returns nothing: no ALL_NEW
    if not before.watched:  # what ALL_NEW would have said: nobody waits
        write.require(write.absent("watched"))
    run = write.request(
        {
            "TableName": table,
            "Key": keys.run_key(after.environment, after.id),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )
    env, now_ms = after.environment, to_epoch_ms(after.updated_at)
    items: list[Request] = [{"Update": run}]
    if taken:
        assert after.lease is not None
        holder, at_ms = (
            slot_holder(after.lease.token, after.id),
            to_epoch_ms(after.lease.expires_at),
        )
        items += [{"Update": _take(table, env, s, holder, now_ms, at_ms)} for s in taken]
    if freed:
        assert before.lease is not None
        holder = slot_holder(before.lease.token, before.id)
        items += [{"Update": _free(table, env, s, holder, now_ms)} for s in freed]
    if beside.ordering_key is not None:
        items += finish_items(table, after, beside.ordering_key)
    if holds:
        items += hold_items(table, env, holds)
    return {"TransactItems": items}


def refused(transition: Transition, beside: Beside, exc: ClientError) -> Any:
    """After a cancelled transaction: the stored run if the run's write had landed
    already (a resend); else raise :class:`ConflictError` (the run changed),
    :class:`NoFreeSlot` (a scope is full), :class:`Contended` (send it again),
    :class:`StorageUnavailable` (an object record moved: write the value again), or
    ``exc``."""
    reasons = cancellation_reasons(exc)
    if not reasons:
        raise exc
    if conflicted(reasons):
        raise Contended() from exc
    if reasons[0].condition_failed:
        wire = reasons[0].item
        landed = landed_transition(transition, wire)
        if landed is not None:
            return landed
        current = run_from_wire(wire) if wire else None
        raise ConflictError(transition.run_id, current) from None
    for slot, reason in zip(beside.taken, reasons[1:], strict=False):
        if reason.condition_failed:
            held = (reason.item or {}).get("holders", {}).get("SS", [])
            raise NoFreeSlot(transition.run_id, slot.scope, len(held), slot.limit) from None
    holds = beside.holds
    if refused_holds(reasons, len({r.sha256 for r in holds})):
        raise StorageUnavailable(moved_record(next(iter(holds)))) from None
    raise exc


def slot_from_wire(wire: dict[str, Any]) -> SlotState:
    at = wire.get("agenda_at", {}).get("N")
    return SlotState(
        scope=wire["scope"]["S"],
        limit=int(wire.get("slot_limit", {}).get("N", "0")),
        holders=frozenset(wire.get("holders", {}).get("SS", [])),
        listed_at=from_epoch_ms(int(at)) if at is not None else None,
    )


class DynamoSlotStore:
    """Slot records of one environment, in the run store's table."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment

    def get_slot(self, scope: str) -> SlotState | None:
        request = {
            "TableName": self.table,
            "Key": keys.slot_key(self.environment, scope),
            "ConsistentRead": True,
        }
        wire = self._send("get_item", request).get("Item")
        return slot_from_wire(wire) if wire and "scope" in wire else None

    def slot_waiters(self, scope: str, limit: int) -> list[str]:
        partition = keys.wait_pk(self.environment, keys.SLOT_WAIT, scope)
        page = self._query(query_waiters(self.table, partition, limit))
        prefix = keys.run_pk(self.environment, "")
        return [item["pk"]["S"][len(prefix) :] for item in page.items]

    def count_slot_waiters(self, scope: str, up_to: int) -> int:
        partition = keys.wait_pk(self.environment, keys.SLOT_WAIT, scope)
        request = {**query_waiters(self.table, partition, up_to), "Select": "COUNT"}
        counted = 0
        for page in every_page(self._query, request, waits_key(partition)):
            counted += page.count
            if counted >= up_to:
                break
        return min(counted, up_to)

    def drop_holder(self, scope: str, holder: str) -> bool:
        x = Expressions(SlotItem)
        x.delete("holders", {holder})
        x.require(x.contains("holders", holder))
        request = x.request(
            {"TableName": self.table, "Key": keys.slot_key(self.environment, scope)}
        )
        return not isinstance(self._send.conditional("update_item", request), Refused)

    def slot_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[SlotState], str | None]:
        request = query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        listed = [{"pk": item["pk"], "sk": item["sk"]} for item in page.items]
        slots: list[SlotState] = []
        if listed:
            batch = {"RequestItems": {self.table: {"Keys": listed, "ConsistentRead": True}}}
            found = self._send("batch_get_item", batch).get("Responses", {}).get(self.table, [])
            by_pk = {wire["pk"]["S"]: wire for wire in found if "scope" in wire}
            slots = [slot_from_wire(by_pk[k["pk"]["S"]]) for k in listed if k["pk"]["S"] in by_pk]
        return slots, page.cursor

    def relist_slot(self, scope: str, at: datetime | None) -> None:
        x = Expressions(SlotItem)
        x.require(x.exists("pk"))
        if at is None:
            x.remove("agenda_at", "agenda_pk")
            x.require(x.absent("holders"))
        else:
            x.set("agenda_at", to_epoch_ms(at))
        request = x.request(
            {"TableName": self.table, "Key": keys.slot_key(self.environment, scope)}
        )
        # refused: the record is gone, or (unlisting) holders came back and keep it listed
        self._send.conditional("update_item", request)


def backoff(attempt: int) -> float:
    """Seconds to wait before the ``attempt``-th resend of a conflicted transaction."""
    return float(CONFLICT_FIRST_WAIT_SECONDS * 2 ** (attempt - 1) * (0.5 + random.random()))


def apply_slotted(
    send: Send,
    sleep: Callable[[float], None],
    table: str,
    transition: Transition,
    beside: Beside,
) -> Run:
    """Send the :func:`transaction` of a transition that writes items ``beside`` the
    run's own, again while another transaction on the same slot record cancels it;
    returns the stored run."""
    request = transaction(table, transition, beside)
    for attempt in range(TRANSACTION_ATTEMPTS):
        if attempt:
            sleep(backoff(attempt))
        try:
            send("transact_write_items", request)
        except ClientError as exc:
            try:
                return refused(transition, beside, exc)  # type: ignore[no-any-return]
            except Contended:
                continue
        return transition.after
    raise StorageUnavailable(CONTENDED)


CONTENDED = (
    f"DynamoDB cancelled a slot transaction {TRANSACTION_ATTEMPTS} times for conflicting "
    "transactions on the same slot record; try again"
)
