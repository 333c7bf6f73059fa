"""Objects in memory: the object store of in-memory apps and tests."""

from __future__ import annotations

import threading
from collections import Counter

from runlane_sqs.core.errors import ObjectUnreadable
from runlane_sqs.core.values import other_size


class InMemoryObjects:
    """A bucket in a dict; ``requests`` counts each operation (``put``, ``get``,
    ``delete``) so tests can say what a run cost."""

    def __init__(self, bucket: str = "runlane-values") -> None:
        self._bucket = bucket
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()

    @property
    def bucket(self) -> str:
        return self._bucket

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.requests["put"] += 1
            self._objects[key] = bytes(data)

    def get(self, key: str, size: int) -> bytes | None:
        with self._lock:
            self.requests["get"] += 1
            data = self._objects.get(key)
        if data is not None and len(data) != size:
            raise ObjectUnreadable(other_size(len(data), size))
        return data

    def delete(self, key: str) -> None:
        with self._lock:
            self.requests["delete"] += 1
            self._objects.pop(key, None)

    def keys(self) -> list[str]:
        """Every key held, sorted."""
        with self._lock:
            return sorted(self._objects)

    def replace(self, key: str, data: bytes | None) -> None:
        """Change or (with ``None``) remove an object behind the app's back, as a test
        of a damaged bucket does."""
        with self._lock:
            if data is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = data
