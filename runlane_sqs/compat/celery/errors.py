"""The errors of the Celery layer: the :class:`Retry` that ``self.retry()`` raises, what
``AsyncResult.get`` raises for a revoked, failed or unfinished run, and the refusals of
options and settings the layer cannot honour.

Each is named by the package, ``runlane_sqs.compat.celery.Retry`` and so on: a task's
failure is recorded under its exception type's qualified name, and a stored failure of
one of these is raised as it again.
"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime, timedelta

from runlane_sqs.core.errors import RunlaneError, RunWaitTimedOut
from runlane_sqs.core.model import Failure


class Retry(RunlaneError):
    """Raised by ``self.retry()``: the attempt failed and asks for another one, which the
    task's retry policy schedules (``exc`` is the error that caused it)."""

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | datetime | None = None,
    ) -> None:
        delay = f" in {when}s" if isinstance(when, int | float) else f" at {when}" if when else ""
        super().__init__(message or f"Retry{delay}: {exc!r}")
        self.exc = exc
        self.when = when
        """``countdown`` seconds, or ``eta``: when the retry is due (``None``: after the
        task's policy delay)."""

    def due_at(self, now: datetime) -> datetime | None:
        """When the retry is due, failed at ``now``: ``when`` seconds later, or at ``when``
        (a naive time is UTC; a past one is now); ``None``: the policy decides."""
        if isinstance(self.when, datetime):
            return max(aware(self.when), now)
        if self.when is None:
            return None
        return now + timedelta(seconds=max(self.when, 0))


class MaxRetriesExceededError(RunlaneError):
    """``self.retry()`` without ``exc`` once the task's ``max_retries`` are used up."""


class TaskRevokedError(RunlaneError):
    """The run was cancelled (``AsyncResult.revoke``, ``runs cancel``), or its first
    attempt to start found its ``expires`` passed."""


class TimeoutError(RunWaitTimedOut, builtins.TimeoutError):
    """``AsyncResult.get(timeout=...)`` gave up before the run finished."""


class TaskFailure(RunlaneError):
    """A failed run whose exception type this app does not know (not a built-in
    exception, not named by a task's ``throws``, ``autoretry_for`` or
    ``dont_autoretry_for``, not in a task's module), or cannot make from its message:
    ``failure`` holds its type, message and traceback."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.type}: {failure.message}")
        self.failure = failure


class UnsupportedOption(RunlaneError, TypeError):
    """A Celery option runlane-sqs cannot honour, or one Celery does not have."""


class InvalidOptionValue(RunlaneError, ValueError):
    """A value of a supported option that runlane-sqs refuses (the message says why)."""


COMPAT_ERRORS = (Retry, MaxRetriesExceededError, TaskRevokedError)
"""The errors of this module a task's failure may be raised as again."""


def aware(at: datetime) -> datetime:
    """Celery's ``enable_utc``: a naive time is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


# A failure is recorded under its exception type's qualified name (``qualified_name``),
# and stored runs and the docs name these runlane_sqs.compat.celery.X: they keep that name.
for _error in (*COMPAT_ERRORS, TimeoutError, TaskFailure, UnsupportedOption, InvalidOptionValue):
    _error.__module__ = "runlane_sqs.compat.celery"
