"""The one clock seam: every decision takes ``now`` from a :class:`Clock`."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Protocol

from runlane_sqs.core.durations import Duration, to_timedelta


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to: for tests of delays, leases and deadlines."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, by: Duration) -> datetime:
        with self._lock:
            self._now += to_timedelta(by, "advance")
            return self._now

    def set(self, to: datetime) -> None:
        with self._lock:
            self._now = to
