"""The DynamoDB request type, and the requests of key items and maintenance records.

A :data:`Request` is the keyword arguments of one low-level client call, so the sync
(boto3) and async (aioboto3) adapters send exactly the same requests. Built here: the
requests of the key items that hold idempotency, singleton, debounce and batch keys
(claim, release, read, delete), the agenda index's pages (the index lists every kind of
item maintenance looks at), and those of maintenance's records, its cursors and when
each queue was last seen drained. Conditions and updates are written with
:class:`~runlane_sqs.adapters.dynamodb.expressions.Expressions`, typed by the models of
:mod:`.items`.

Every other item's requests are built in the module of that item: the run item's in
:mod:`.runs`, the token item's in :mod:`.tokens`, and the others' in :mod:`.slots`,
:mod:`.groups`, :mod:`.schedules`, :mod:`.rates`, :mod:`.objects`, :mod:`.ordering`,
:mod:`.health` and :mod:`.bulk`.
"""

from __future__ import annotations

from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import AGENDA_INDEX, KeyItem

Request = dict[str, Any]
"""A DynamoDB request: the keyword arguments of one low-level client call."""


def claim_key(
    table: str,
    pk: str,
    run_id: str,
    *,
    now_ms: int,
    expires_s: int | None,
    previous_owner: str | None,
) -> Request:
    """Take an idempotency/singleton key for ``run_id``.

    Succeeds if the key is free, expired (TTL deletion can lag by days), or still held by
    ``previous_owner``, a run the caller saw finished and so no longer owning it.
    """
    item = KeyItem(pk=pk, sk=keys.KEY_SK, run_id=run_id, created_at=now_ms, expires_at=expires_s)
    x = Expressions(KeyItem)
    free = [x.absent("pk"), x.compare("expires_at", "<", now_ms // 1000)]
    if previous_owner is not None:
        free.append(x.compare("run_id", "=", previous_owner))
    x.require(x.either(*free))
    return x.request(
        {
            "TableName": table,
            "Item": item.serialize(),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def release_key(table: str, pk: str, run_id: str) -> Request:
    """Give a key back, only if ``run_id`` still holds it."""
    x = Expressions(KeyItem)
    x.require(x.compare("run_id", "=", run_id))
    return x.request({"TableName": table, "Key": keys.key_item_key(pk)})


def get_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk), "ConsistentRead": True}


def delete_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk)}


def query_agenda(table: str, partition: str, until_ms: int, limit: int) -> Request:
    """One page of the agenda index: runs in ``partition`` due for a look by ``until_ms``."""
    x = Expressions()
    x.key(x.compare("agenda_pk", "=", partition), x.compare("agenda_at", "<=", until_ms))
    return x.request({"TableName": table, "IndexName": AGENDA_INDEX, "Limit": limit})


def query_cursors(table: str, environment: str) -> Request:
    """Every maintenance cursor of the environment (one small partition)."""
    return query_maintenance(table, environment, keys.CURSOR_SK_PREFIX)


def query_maintenance(table: str, environment: str, prefix: str) -> Request:
    """The maintenance items of the environment whose sort key starts with ``prefix``."""
    x = Expressions()
    x.key(
        x.compare("pk", "=", keys.maintenance_pk(environment)),
        x.begins_with("sk", prefix),
    )
    return x.request({"TableName": table, "ConsistentRead": True})


def put_cursor(table: str, environment: str, partition: str, cursor: str) -> Request:
    return {
        "TableName": table,
        "Item": {
            "pk": {"S": keys.maintenance_pk(environment)},
            "sk": {"S": keys.cursor_sk(partition)},
            "cursor": {"S": cursor},
        },
    }


def delete_cursor(table: str, environment: str, partition: str) -> Request:
    return {
        "TableName": table,
        "Key": {
            "pk": {"S": keys.maintenance_pk(environment)},
            "sk": {"S": keys.cursor_sk(partition)},
        },
    }


def query_drained(table: str, environment: str) -> Request:
    """When each queue was last seen drained (beside the cursors)."""
    return query_maintenance(table, environment, keys.DRAINED_SK_PREFIX)


def put_drained(table: str, environment: str, queue: str, at_ms: int) -> Request:
    """Keep the later drained time only (overlapping passes never move it back)."""
    x = Expressions()
    x.require(x.either(x.absent("drained_at"), x.compare("drained_at", "<", at_ms)))
    return x.request(
        {
            "TableName": table,
            "Item": {
                "pk": {"S": keys.maintenance_pk(environment)},
                "sk": {"S": keys.drained_sk(queue)},
                "drained_at": {"N": str(at_ms)},
            },
        }
    )
