"""Durations: every public API accepts a ``timedelta`` or a number of seconds."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from runlane_sqs.core.errors import ConfigurationError

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
