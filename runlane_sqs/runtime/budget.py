"""How long the per-message path keeps retrying a DynamoDB request that failed as
unavailable: one time budget per request, above botocore's own retries.

Each request is first retried by botocore (standard mode: up to 5 attempts with
backoff, for throttling, 5xx and connection errors). When botocore gives up, the store
raises :class:`~runlane_sqs.errors.StorageUnavailable`, and the per-message path sends
the request again only while its budget lasts: 10 s for a read or a claim, and for a
write fenced on an attempt's lease, never past one second before that lease expires
(after that the write would be refused anyway, and maintenance recovers the run). So a
request makes a bounded number of tries in a bounded time instead of 5 times 5
(docs/operations.md, "Leases and heartbeats").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.machine import Transition

DEFAULT_BUDGET = timedelta(seconds=10)
"""Retry time of a read, a claim and any write not fenced on a lease."""
LEASE_MARGIN = timedelta(seconds=1)
"""A fenced write stops retrying this long before its lease expires."""
MAX_TRIES = 4
"""Calls of one request at most (each with botocore's own retries)."""
F = TypeVar("F", bound=Callable[..., Any])


def write_budget(transition: Transition, now: datetime) -> timedelta:
    """The retry time of ``transition``'s write: the default, or less when the write is
    fenced on a lease that expires sooner (zero: one try, no retry)."""
    lease = transition.before.lease
    if transition.fence is None or lease is None or lease.token != transition.fence:
        return DEFAULT_BUDGET
    left = lease.expires_at - now - LEASE_MARGIN
    return max(timedelta(0), min(DEFAULT_BUDGET, left))


def storage_retry(budget: timedelta = DEFAULT_BUDGET) -> Callable[[F], F]:
    """A tenacity decorator: retry on :class:`StorageUnavailable` while ``budget`` lasts
    (at most :data:`MAX_TRIES` calls), backing off from 0.2 s."""
    decorate = retry(
        retry=retry_if_exception_type(StorageUnavailable),
        stop=stop_after_attempt(MAX_TRIES) | stop_after_delay(budget.total_seconds()),
        wait=wait_exponential(multiplier=0.2, max=5),
        reraise=True,
    )
    return cast("Callable[[F], F]", decorate)
