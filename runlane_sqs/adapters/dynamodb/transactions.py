"""Transactions that hold the caller's writes and new runs (docs/transactions.md).

A new run's actions are the ones :meth:`DynamoRunStore.create_run` sends: a ``Put`` per
key claim, the run's ``Put`` (conditioned on no run with its id), and an ``Update`` per
object its payload references. Before sending, the request is held to DynamoDB's limits
(docs/transactions.md, "DynamoDB's limits, checked before sending"): at most 100
actions, 4 MB of items, no two actions on one item. Item sizes follow DynamoDB's rules
(attribute names plus values, numbers counted high); for an ``Update``, whose item is
only known to DynamoDB, what the request carries is counted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb import keys, requests, runs
from runlane_sqs.adapters.dynamodb.errors import (
    Send,
    cancellation_reasons,
    error_code,
    refused_as_malformed,
)
from runlane_sqs.adapters.dynamodb.objects import hold_items
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.errors import InvalidTransaction, StorageError
from runlane_sqs.core.limits import MAX_ITEM_BYTES, MAX_TRANSACTION_ACTIONS, MAX_TRANSACTION_BYTES
from runlane_sqs.core.model import Run, RunEvent
from runlane_sqs.core.values import ENVELOPE_MARK, decode_json, references_in
from runlane_sqs.ports.keys import KeyClaim
from runlane_sqs.ports.transactions import Action, Cancelled, Refusal, RefusalReason

KINDS = ("Put", "Update", "Delete", "ConditionCheck")


def creation_actions(
    table: str,
    environment: str,
    run: Run,
    event: RunEvent,
    payload_text: str,
    claims: Sequence[KeyClaim],
) -> list[Action]:
    """The key claims' ``Put``s, the run's ``Put``, the held objects' ``Update``s."""
    now_ms = to_epoch_ms(run.created_at)
    actions: list[Action] = [
        {
            "Put": requests.claim_key(
                table,
                keys.key_pk(environment, c.kind, c.task, c.key),
                run.id,
                now_ms=now_ms,
                expires_s=to_epoch_ms(c.expires_at) // 1000 if c.expires_at else None,
                previous_owner=c.previous_owner,
            )
        }
        for c in claims
    ]
    actions.append({"Put": runs.put_run(table, run_to_wire(run, [event], payload_text))})
    if payload_text.startswith(ENVELOPE_MARK):
        holds = references_in([decode_json(payload_text)])
        if holds:
            actions += hold_items(table, environment, holds)
    return actions


def _text_size(text: Any) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def _number_size(number: Any) -> int:
    return len(str(number)) // 2 + 2


def _one_byte(_: Any) -> int:
    return 1


SCALAR_SIZES = {"S": _text_size, "N": _number_size, "B": len, "BOOL": _one_byte, "NULL": _one_byte}


def value_size(value: dict[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value (low-level form)."""
    [(kind, inner)] = value.items()
    if kind in SCALAR_SIZES:
        return SCALAR_SIZES[kind](inner)
    if kind in ("SS", "NS", "BS"):
        return sum(SCALAR_SIZES[kind[0]](member) for member in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(member) for member in inner)
    if kind == "M":
        return 3 + item_size(inner) + len(inner)
    raise InvalidTransaction(f"an attribute value of unknown type {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    """The bytes DynamoDB counts for an item: its attribute names and values."""
    return sum(_text_size(name) + value_size(value) for name, value in item.items())


def _action_of(index: int, action: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(action, dict) or len(action) != 1:
        raise InvalidTransaction(
            f"action {index} must be one of {', '.join(KINDS)}, as TransactItems holds "
            f"them, not {type(action).__name__}"
        )
    [(kind, body)] = action.items()
    if kind not in KINDS or not isinstance(body, dict) or "TableName" not in body:
        raise InvalidTransaction(
            f"action {index} must be one of {', '.join(KINDS)} with a TableName, not {kind!r}"
        )
    return kind, body


class DynamoTransactions:
    """Transactions on the run table's client: a new run's actions beside the caller's."""

    def __init__(self, send: Send, table: str, environment: str) -> None:
        self._send = send
        self.table = table
        self.environment = environment

    def creation_actions(
        self, run: Run, event: RunEvent, payload_text: str, claims: Sequence[KeyClaim]
    ) -> list[Action]:
        return creation_actions(self.table, self.environment, run, event, payload_text, claims)

    def check(self, actions: Sequence[Action]) -> None:
        if not actions:
            raise InvalidTransaction("a transaction needs at least one action")
        if len(actions) > MAX_TRANSACTION_ACTIONS:
            raise InvalidTransaction(
                f"a transaction holds at most {MAX_TRANSACTION_ACTIONS} actions, this one "
                f"{len(actions)} "
                "(each new run takes one, plus one per key and per large value it holds)"
            )
        total = 0
        seen: dict[tuple[str, str], int] = {}
        for index, action in enumerate(actions):
            kind, body = _action_of(index, action)
            size = self._size(index, kind, body)
            total += size
            key = self._key_of(body)
            if key is None:
                continue
            where = (str(body["TableName"]), json.dumps(key, sort_keys=True, default=repr))
            if where in seen:
                raise InvalidTransaction(
                    f"actions {seen[where]} and {index} write one item of table "
                    f"{body['TableName']!r}: a transaction holds one action per item"
                )
            seen[where] = index
        if total > MAX_TRANSACTION_BYTES:
            raise InvalidTransaction(
                f"a transaction's items are at most 4 MB together; these are {total} bytes"
            )

    def _size(self, index: int, kind: str, body: dict[str, Any]) -> int:
        try:
            if kind == "Put":
                size = item_size(body.get("Item") or {})
                if size > MAX_ITEM_BYTES:
                    raise InvalidTransaction(
                        f"action {index} puts an item of {size} bytes into "
                        f"{body['TableName']!r}; DynamoDB keeps items of at most 400 KB"
                    )
                return size
            return item_size(body.get("Key") or {}) + item_size(
                body.get("ExpressionAttributeValues") or {}
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidTransaction(
                f"action {index} is not in DynamoDB's low-level form ({exc})"
            ) from None

    def _key_of(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The key an action writes, when it is known here: one an action names, or the
        key attributes of an item put into the run table."""
        if "Key" in body:
            key: dict[str, Any] = body["Key"]
            return key
        item = body.get("Item") or {}
        if body["TableName"] == self.table and "pk" in item and "sk" in item:
            return {"pk": item["pk"], "sk": item["sk"]}
        return None

    def commit(self, actions: Sequence[Action], token: str) -> None:
        self.check(actions)
        request = {"TransactItems": list(actions), "ClientRequestToken": token}
        try:
            self._send("transact_write_items", request)
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if not reasons:
                raise
            raise Cancelled(
                [
                    Refusal(
                        index,
                        reason.reason,
                        reason.code,
                        reason.message,
                        (reason.item or {}).get("run_id", {}).get("S"),
                    )
                    for index, reason in enumerate(reasons)
                    if reason.reason is not RefusalReason.NONE
                ]
            ) from None
        except StorageError as exc:
            cause = exc.__cause__
            if refused_as_malformed(exc) or (
                isinstance(cause, ClientError)
                and error_code(cause) == "IdempotentParameterMismatchException"
            ):
                raise InvalidTransaction(f"DynamoDB refused the transaction: {cause}") from None
            raise
