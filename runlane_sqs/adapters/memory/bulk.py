"""Bulk operations in memory, for tests: the same conditions and order as DynamoDB."""

from __future__ import annotations

import threading
from dataclasses import replace

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import STRING, KeyShape, decode_cursor, encode_cursor
from runlane_sqs.core.bulk import BulkOperation
from runlane_sqs.ports.bulk import OperationConflict


class InMemoryOperationStore:
    """Bulk operations in a dict, guarded by a lock."""

    def __init__(self, environment: str = "dev") -> None:
        self.environment = environment
        self._operations: dict[str, BulkOperation] = {}
        self._lock = threading.Lock()

    def get_operation(self, operation_id: str) -> BulkOperation | None:
        with self._lock:
            return self._operations.get(operation_id)

    def list_operations(
        self, limit: int, cursor: str | None
    ) -> tuple[list[BulkOperation], str | None]:
        pk = keys.operation_pk(self.environment)
        start = decode_cursor(cursor, KeyShape({"pk": STRING, "sk": STRING}, ("pk", pk)))
        with self._lock:
            found = sorted(self._operations.values(), key=lambda o: o.id, reverse=True)
        if start:
            found = [o for o in found if o.id < start["sk"]["S"]]
        page = found[:limit]
        if len(found) <= limit:
            return page, None
        return page, encode_cursor({"pk": {"S": pk}, "sk": {"S": page[-1].id}})

    def put_operation(self, operation: BulkOperation) -> BulkOperation:
        with self._lock:
            current = self._operations.get(operation.id)
            if (current.version if current is not None else 0) != operation.version:
                raise OperationConflict(operation.id, current)
            stored = replace(operation, version=operation.version + 1)
            self._operations[operation.id] = stored
            return stored
