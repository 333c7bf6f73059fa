"""The bulk operation store port: the records of bulk operations, beside the runs
(:mod:`runlane_sqs.core.bulk`).

Adapter: :mod:`runlane_sqs.adapters.dynamodb.bulk` (DynamoDB, or the in-memory
DynamoDB of :mod:`runlane_sqs.testing`). Each run store hands out its operation store
as ``store.operations``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.bulk import BulkOperation
from runlane_sqs.core.errors import RunlaneError


class OperationConflict(RunlaneError):
    """A bulk operation's write lost: the stored record is not the version the write
    expected (``current``; ``None`` when there is none)."""

    def __init__(self, operation_id: str, current: BulkOperation | None) -> None:
        super().__init__(f"bulk operation {operation_id} changed before the write")
        self.operation_id = operation_id
        self.current = current


class OperationStore(Protocol):
    """Bulk operations of one environment. Every write is conditional on the version."""

    def get_operation(self, operation_id: str) -> BulkOperation | None:
        """The operation as stored now (a consistent read)."""
        ...

    def list_operations(
        self, limit: int, cursor: str | None
    ) -> tuple[list[BulkOperation], str | None]:
        """A page of operations, newest first, and the next cursor (``None`` at the end)."""
        ...

    def operation_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[BulkOperation], str | None]:
        """A page of the running operations listed on the agenda partition ``partition``
        by ``until`` (their lease ended by then, unless renewed since: as stored now)."""
        ...

    def put_operation(self, operation: BulkOperation) -> BulkOperation:
        """Store ``operation`` one version on, if the stored one is ``operation.version``
        (0: if none is stored); returns it as stored. Raises :class:`OperationConflict`
        otherwise."""
        ...
