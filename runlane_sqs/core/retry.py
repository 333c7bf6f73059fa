"""Retry policy: a pure function from (policy, attempt, failure) to a decision."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError


class Backoff(StrEnum):
    """How the delay between attempts grows."""

    FIXED = "fixed"
    """Every retry waits ``delay``."""
    EXPONENTIAL = "exponential"
    """Retry n waits ``delay * 2**(n-1)``, capped at ``max_delay``."""


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What happens after a failed attempt: retry at ``retry_at``, or stop (``None``)."""

    retry_at: datetime | None

    @property
    def will_retry(self) -> bool:
        return self.retry_at is not None


@dataclass(frozen=True, slots=True, init=False)
class RetryPolicy:
    """When a failed run is tried again.

    ``max_attempts`` counts the first attempt: ``max_attempts=3`` means one attempt and up
    to two retries. ``jitter`` is a fraction (0 to 1) of the delay that is randomly
    subtracted, so a fleet of retries does not arrive at once. Exceptions that are
    instances of a type in ``non_retryable`` fail the run at once.
    """

    max_attempts: int
    backoff: Backoff
    delay: timedelta
    max_delay: timedelta
    jitter: float
    non_retryable: tuple[type[BaseException], ...]

    def __init__(
        self,
        max_attempts: int = 1,
        backoff: Backoff | str = Backoff.EXPONENTIAL,
        delay: Duration = 1.0,
        max_delay: Duration = timedelta(hours=1),
        jitter: float = 0.0,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        if max_attempts < 1:
            raise ConfigurationError("max_attempts counts the first attempt and must be >= 1")
        if not 0.0 <= jitter <= 1.0:
            raise ConfigurationError("jitter is a fraction of the delay between 0 and 1")
        try:
            backoff_kind = Backoff(backoff)
        except ValueError:
            raise ConfigurationError(
                f"backoff must be one of {[b.value for b in Backoff]}, not {backoff!r}"
            ) from None
        first, cap = to_timedelta(delay, "delay"), to_timedelta(max_delay, "max_delay")
        if cap < first:
            raise ConfigurationError("max_delay must be at least delay")
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "backoff", backoff_kind)
        object.__setattr__(self, "delay", first)
        object.__setattr__(self, "max_delay", cap)
        object.__setattr__(self, "jitter", jitter)
        object.__setattr__(self, "non_retryable", tuple(non_retryable))

    def delay_after(self, attempt: int, rand: float = 0.0) -> timedelta:
        """The wait after failed attempt number ``attempt`` (1-based).

        ``rand`` in [0, 1) scales the jitter; pass ``random.random()`` in production.
        """
        if self.backoff is Backoff.FIXED:
            base = self.delay
        else:
            exponent = min(attempt - 1, 64)
            seconds = self.delay.total_seconds() * (2**exponent)
            base = timedelta(seconds=min(seconds, self.max_delay.total_seconds()))
        base = min(base, self.max_delay)
        return base - base * (self.jitter * rand)

    def is_retryable(self, exc: BaseException) -> bool:
        """False when ``exc`` is an instance of one of the ``non_retryable`` types."""
        return not isinstance(exc, self.non_retryable)

    def decide(
        self,
        attempt: int,
        now: datetime,
        *,
        retryable: bool = True,
        rand: float | None = None,
        exc: BaseException | None = None,
    ) -> RetryDecision:
        """Decide what follows failed attempt ``attempt``; ``exc`` is the exception it
        failed with, if any, for a policy whose decision reads it (this one does not)."""
        if not retryable or attempt >= self.max_attempts:
            return RetryDecision(retry_at=None)
        jitter_draw = random.random() if rand is None else rand
        return RetryDecision(retry_at=now + self.delay_after(attempt, jitter_draw))


def _qualified(exc_type: type[BaseException]) -> str:
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


def qualified_name(exc: BaseException) -> str:
    """The name a failure of this exception is recorded under."""
    return _qualified(type(exc))


NO_RETRY = RetryPolicy(max_attempts=1)
