"""The object store port: where values too large for their record are kept (S3).

Adapters: :class:`runlane_sqs.adapters.s3.S3Objects` (S3) and
:class:`runlane_sqs.adapters.memory.objects.InMemoryObjects` (in memory, for tests).
Keys are content addresses (:func:`runlane_sqs.core.values.object_key`): an object is
written once and never changed, so writing it again is harmless.
"""

from __future__ import annotations

from typing import Protocol


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

    def get(self, key: str) -> bytes | None:
        """The object at ``key``, ``None`` when there is none."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` (none there: no error)."""
        ...
