"""Bulk operations in DynamoDB: one item per operation in the environment's collection
(``BULK#{env}``, sorted by id, which begins with the time it was started), its record as
JSON. Every write is a ``PutItem`` conditioned on the version read. A running operation
is on the agenda (kind ``bulk``, one partition) at the end of its lease
(:func:`~runlane_sqs.core.bulk.agenda_at`); a stopped or done one is not.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import STRING, KeyShape, Query, agenda_key
from runlane_sqs.adapters.dynamodb.errors import Refused, Send
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.requests import query_agenda
from runlane_sqs.core.bulk import BulkOperation, agenda_at
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.ports.bulk import OperationConflict


def _from_wire(wire: dict[str, Any]) -> BulkOperation:
    return BulkOperation.from_json(json.loads(wire["record"]["S"]))


class DynamoOperationStore:
    """The bulk operations of one environment, sent through its run store's client."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment

    def get_operation(self, operation_id: str) -> BulkOperation | None:
        request = {
            "TableName": self.table,
            "Key": keys.operation_key(self.environment, operation_id),
            "ConsistentRead": True,
        }
        wire = self._send("get_item", request).get("Item")
        return _from_wire(wire) if wire else None

    def list_operations(
        self, limit: int, cursor: str | None
    ) -> tuple[list[BulkOperation], str | None]:
        pk = keys.operation_pk(self.environment)
        x = Expressions()
        x.key(x.compare("pk", "=", pk))
        request = x.request(
            {
                "TableName": self.table,
                "ConsistentRead": True,
                "ScanIndexForward": False,
                "Limit": limit,
            }
        )
        page = self._query(request, cursor, KeyShape({"pk": STRING, "sk": STRING}, ("pk", pk)))
        return [_from_wire(item) for item in page.items], page.cursor

    def operation_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[BulkOperation], str | None]:
        request = query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        found = (self.get_operation(listed["sk"]["S"]) for listed in page.items)
        return [o for o in found if o is not None and agenda_at(o) is not None], page.cursor

    def put_operation(self, operation: BulkOperation) -> BulkOperation:
        stored = replace(operation, version=operation.version + 1)
        item = {
            **keys.operation_key(self.environment, operation.id),
            "version": {"N": str(stored.version)},
            "record": {"S": json.dumps(stored.to_json(), separators=(",", ":"))},
        }
        listed = agenda_at(stored)
        if listed is not None:
            kind = AgendaKind.BULK.value
            item["agenda_pk"] = {"S": keys.agenda_pk(self.environment, kind, operation.id[-8:])}
            item["agenda_at"] = {"N": str(to_epoch_ms(listed))}
        x = Expressions()
        if operation.version == 0:
            x.require(x.absent("pk"))
        else:
            x.require(x.compare("version", "=", operation.version))
        request = x.request(
            {
                "TableName": self.table,
                "Item": item,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        )
        sent = self._send.conditional("put_item", request)
        if isinstance(sent, Refused):
            raise OperationConflict(operation.id, _from_wire(sent.item) if sent.item else None)
        return stored
