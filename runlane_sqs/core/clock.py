"""Time: the one clock seam, durations and stored times.

Every decision takes ``now`` from a :class:`Clock`. Every public API accepts a duration
as a ``timedelta`` or a number of seconds (:data:`Duration`). Times are stored, and
compared, in whole milliseconds since the epoch (:func:`to_epoch_ms`,
:func:`truncate_ms`)."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol

from runlane_sqs.core.errors import ConfigurationError


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


Duration = timedelta | float | int


def to_timedelta(value: Duration, what: str = "duration") -> timedelta:
    """Normalise a duration; negative or non-finite values are configuration errors."""
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise ConfigurationError(f"{what} must be a timedelta or seconds, not {value!r}")
    if isinstance(value, timedelta):
        result = value
    else:
        if not math.isfinite(value):
            raise ConfigurationError(f"{what} must be finite, not {value!r}")
        result = timedelta(seconds=value)
    if result < timedelta(0):
        raise ConfigurationError(f"{what} must not be negative, got {value!r}")
    return result


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)


def to_epoch_ms(at: datetime) -> int:
    """Whole milliseconds since the epoch: how times are stored."""
    return (at - EPOCH) // ONE_MS


def from_epoch_ms(ms: int) -> datetime:
    return EPOCH + ms * ONE_MS


def truncate_ms(at: datetime) -> datetime:
    """``at`` as storage will give it back."""
    return from_epoch_ms(to_epoch_ms(at))
