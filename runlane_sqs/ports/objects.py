"""The object store port: where values too large for their record are kept (S3), and
the records that count who references each object (in the run table).

Adapters: :class:`runlane_sqs.adapters.s3.S3Objects` (S3) and
:class:`runlane_sqs.adapters.memory.objects.InMemoryObjects` (in memory, for tests);
the object records are the run store's (``store.object_records``). Keys are content
addresses (:func:`runlane_sqs.core.values.object_key`): an object is written once and
never changed, so writing it again is harmless.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.values import ObjectRecord


class ObjectStore(Protocol):
    """One bucket of immutable objects."""

    @property
    def bucket(self) -> str:
        """The bucket's name, as references name it."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` (again: the same bytes, no harm); raises
        :class:`~runlane_sqs.errors.StorageUnavailable` when the store could not be
        reached and :class:`~runlane_sqs.errors.StorageError` when it refused."""
        ...

    def get(self, key: str, size: int) -> bytes | None:
        """The object at ``key``, ``None`` when there is none; raises
        :class:`~runlane_sqs.core.errors.ObjectUnreadable` when the store will not say
        (S3's ``AccessDenied``), and when the object does not hold ``size`` bytes (the
        size its reference names), before reading them: a reader never downloads more
        than the reference says."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` (none there: no error)."""
        ...


class ObjectRecords(Protocol):
    """The object records of one environment (:class:`~runlane_sqs.core.values.
    ObjectRecord`). A write that stores a reference counts it in the same transaction,
    and deleting a run takes its references off (the run store does both)."""

    def pin(self, sha256: str, size: int, now: datetime) -> str:
        """Keep the record of ``sha256`` (made now if there is none) from deletion for
        :data:`~runlane_sqs.core.values.PIN_DURATION`; returns its generation, the one
        the object is written in."""
        ...

    def object_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ObjectRecord], str | None]:
        """One page of records listed on the agenda by ``until`` (read again, whole)."""
        ...

    def remove(self, record: ObjectRecord, now: datetime) -> bool:
        """Delete ``record`` if it is still as read and removable now (no holder, no
        pin): True if deleted, and its object may go. A record that has holders again
        leaves the agenda."""
        ...
