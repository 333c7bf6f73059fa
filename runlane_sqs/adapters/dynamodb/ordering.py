"""Ordered runs in DynamoDB: an order record and place entries per ordering key
(docs/design/storage.md, "Ordered runs").

Both live in the partition of the key's scope, ``SLOT#{env}#order#{key}``, where slot
records live:

- the order record (sk ``SLOT``): ``next_place``, ``unfinished``, and an agenda listing
  while maintenance must check that the turn was handed on;
- one place entry per unfinished run (sk ``PLACE#{number:016d}``, ``run_id``): a
  strongly consistent ``Query`` of the partition finds the run holding the turn.

A trigger writes its run, the order record (conditioned on what it read) and its place
entry in one ``TransactWriteItems``. The write that makes an ordered run terminal deletes
its entry and counts the record down in the same transaction as the run's own write
(:mod:`runlane_sqs.adapters.dynamodb.slots`), fenced by the run's condition.
"""

from __future__ import annotations

from datetime import datetime

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.errors import (
    Send,
    cancellation_reasons,
    conflicted,
)
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.keys import slot_agenda_pk
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.model import Run
from runlane_sqs.core.ordering import PLACE_DIGITS, TURN_CHECK_AFTER, OrderHead, Place, order_scope

PLACE_PREFIX = "PLACE#"


def place_sk(number: int) -> str:
    return f"{PLACE_PREFIX}{number:0{PLACE_DIGITS}d}"


def _place_key(environment: str, key: str, number: int) -> dict[str, dict[str, str]]:
    return {"pk": {"S": keys.slot_pk(environment, order_scope(key))}, "sk": {"S": place_sk(number)}}


def trigger_items(table: str, run: Run, place: Place) -> list[Request]:
    """The order record's update and the place entry a trigger writes with its run."""
    env, scope, seen = run.environment, order_scope(place.key), place.seen
    x = Expressions()
    x.set("next_place", seen.next_place + 1)
    x.set("unfinished", seen.unfinished + 1)
    x.set("environment", env)
    x.set("scope", scope)
    x.set("updated_at", to_epoch_ms(run.created_at))
    if seen.next_place == 0:
        x.require(x.absent("next_place"))
    else:
        x.require(
            x.compare("next_place", "=", seen.next_place),
            x.compare("unfinished", "=", seen.unfinished),
        )
    record = x.request({"TableName": table, "Key": keys.slot_key(env, scope)})
    x = Expressions()
    x.require(x.absent("pk"))
    item = {**_place_key(env, place.key, place.number), "run_id": {"S": run.id}}
    entry = x.request({"TableName": table, "Item": {**item, "environment": {"S": env}}})
    return [{"Update": record}, {"Put": entry}]


def finish_items(table: str, run: Run, key: str) -> list[Request]:
    """What the write making ``run`` terminal does to its key's line: its place entry is
    deleted, the record counted down and listed for maintenance's check of the turn."""
    assert run.place is not None
    env, scope = run.environment, order_scope(key)
    now_ms = to_epoch_ms(run.updated_at)
    check_ms = to_epoch_ms(run.updated_at + TURN_CHECK_AFTER)
    x = Expressions()
    x.add("unfinished", -1)
    x.set("agenda_pk", slot_agenda_pk(env, scope))
    x.set("agenda_at", check_ms)
    x.set("updated_at", now_ms)
    record = x.request({"TableName": table, "Key": keys.slot_key(env, scope)})
    entry = {"TableName": table, "Key": _place_key(env, key, run.place)}
    return [{"Update": record}, {"Delete": entry}]


def moved(exc: ClientError, first: int) -> bool:
    """Did a cancelled trigger transaction fail on the order record (read again, try
    again)? ``first`` is the index of the record's update among the items."""
    reasons = cancellation_reasons(exc)
    if conflicted(reasons):
        return True
    return len(reasons) > first and reasons[first].condition_failed


class DynamoOrderStore:
    """Order records and place entries of one environment, in the run store's table."""

    def __init__(self, send: Send, table: str, environment: str) -> None:
        self._send = send
        self.table = table
        self.environment = environment

    def order_head(self, key: str) -> OrderHead:
        x = Expressions()
        x.project("next_place", "unfinished")
        request = x.request(
            {
                "TableName": self.table,
                "Key": keys.slot_key(self.environment, order_scope(key)),
                "ConsistentRead": True,
            }
        )
        wire = self._send("get_item", request).get("Item") or {}
        return OrderHead(
            next_place=int(wire.get("next_place", {}).get("N", "0")),
            unfinished=int(wire.get("unfinished", {}).get("N", "0")),
        )

    def first_place(self, key: str) -> tuple[int, str] | None:
        x = Expressions()
        x.key(
            x.compare("pk", "=", keys.slot_pk(self.environment, order_scope(key))),
            x.begins_with("sk", PLACE_PREFIX),
        )
        request = x.request({"TableName": self.table, "ConsistentRead": True, "Limit": 1})
        items = self._send("query", request).get("Items", [])
        if not items:
            return None
        return int(items[0]["sk"]["S"][len(PLACE_PREFIX) :]), str(items[0]["run_id"]["S"])

    def unlist_order(self, key: str, listed_at: datetime) -> None:
        x = Expressions()
        x.remove("agenda_at", "agenda_pk")
        x.require(x.compare("agenda_at", "=", to_epoch_ms(listed_at)))
        request = x.request(
            {"TableName": self.table, "Key": keys.slot_key(self.environment, order_scope(key))}
        )
        self._send.conditional("update_item", request)  # refused: listed again since
