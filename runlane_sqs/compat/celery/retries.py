"""Celery's retry options as a runlane retry policy (:func:`retry_policy_of`):
``max_retries``, ``default_retry_delay``, ``autoretry_for``, ``retry_backoff`` and
``retry_kwargs``; and Celery's rule on what is retried, a :class:`Retry` from
``self.retry()``, due when its ``countdown`` or ``eta`` says, or an ``autoretry_for``
exception (:class:`CeleryRetryPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs.compat.celery.errors import InvalidOptionValue, Retry, TaskRevokedError
from runlane_sqs.compat.celery.options import CeleryTaskOptions, exception_types
from runlane_sqs.core.clock import to_timedelta
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.retry import RetryDecision, RetryPolicy

DEFAULT_MAX_RETRIES = 3
"""Celery's ``max_retries`` when a task does not set one."""
DEFAULT_RETRY_DELAY_SECONDS = 180
"""Celery's ``default_retry_delay``."""
DEFAULT_BACKOFF_MAX_SECONDS = 600
"""Celery's ``retry_backoff_max``."""
UNLIMITED_ATTEMPTS = 1_000_000
"""``max_attempts`` of a task with ``max_retries=None`` (Celery: retry for ever)."""


@dataclass(frozen=True, slots=True, init=False)
class CeleryRetryPolicy(RetryPolicy):
    """A :class:`RetryPolicy` with Celery's rule on what is retried: a :class:`Retry`
    from ``self.retry()``, and exceptions of the ``autoretry_for`` types. Any other
    exception fails the run at once, as in Celery."""

    retry_for: tuple[type[BaseException], ...]

    def __init__(self, retry_for: tuple[type[BaseException], ...], **policy: Any) -> None:
        RetryPolicy.__init__(self, **policy)
        object.__setattr__(self, "retry_for", (Retry, *retry_for))

    def is_retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retry_for) and RetryPolicy.is_retryable(self, exc)

    def decide(
        self,
        attempt: int,
        now: datetime,
        *,
        retryable: bool = True,
        rand: float | None = None,
        exc: BaseException | None = None,
    ) -> RetryDecision:
        """The policy's decision, due when ``self.retry(countdown=)`` or ``eta=`` asked
        (any length) if a retry is left."""
        decision = RetryPolicy.decide(self, attempt, now, retryable=retryable, rand=rand)
        due = exc.due_at(now) if isinstance(exc, Retry) and decision.will_retry else None
        return decision if due is None else RetryDecision(retry_at=due)


def retry_policy_of(name: str, options: CeleryTaskOptions) -> CeleryRetryPolicy:
    """The runlane retry policy that stands for a task's Celery retry options."""
    retry_kwargs = options.get("retry_kwargs", {})
    max_retries = retry_kwargs.get("max_retries", options.get("max_retries", DEFAULT_MAX_RETRIES))
    attempts = UNLIMITED_ATTEMPTS if max_retries is None else max_retries + 1
    never = (
        TaskRevokedError,
        *exception_types(options.get("dont_autoretry_for", ()), "dont_autoretry_for", name),
    )
    retry_for = exception_types(options.get("autoretry_for", ()), "autoretry_for", name)
    backoff = options.get("retry_backoff", False)
    try:
        if backoff:
            return CeleryRetryPolicy(
                retry_for,
                max_attempts=attempts,
                backoff="exponential",
                delay=1 if backoff is True else backoff,
                max_delay=options.get("retry_backoff_max", DEFAULT_BACKOFF_MAX_SECONDS),
                jitter=1.0 if options.get("retry_jitter", True) else 0.0,
                non_retryable=never,
            )
        delay = retry_kwargs.get(
            "countdown", options.get("default_retry_delay", DEFAULT_RETRY_DELAY_SECONDS)
        )
        return CeleryRetryPolicy(
            retry_for,
            max_attempts=attempts,
            backoff="fixed",
            delay=delay,
            max_delay=max(to_timedelta(delay, "default_retry_delay"), timedelta(seconds=1)),
            non_retryable=never,
        )
    except ConfigurationError as exc:
        raise InvalidOptionValue(f"task {name!r}: {exc}") from None
