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

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from time import monotonic
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.machine import Transition

DEFAULT_BUDGET = timedelta(seconds=10)
"""Retry time of a read, a claim and any write not fenced on a lease."""
LEASE_MARGIN = timedelta(seconds=1)
"""A fenced write stops retrying this long before its lease expires."""
MAX_TRIES = 4
"""Calls of one request at most (each with botocore's own retries)."""
BACKOFF: wait_base = wait_exponential(multiplier=0.2, max=5)
"""The wait before each call again: 0.2 s, then doubling, at most 5 s."""
UNAVAILABLE = retry_if_exception_type(StorageUnavailable)
"""What is called again: a request the store could not serve, nothing else."""
A = TypeVar("A")
R = TypeVar("R")


def write_budget(transition: Transition, now: datetime) -> timedelta:
    """The retry time of ``transition``'s write: the default, or less when the write is
    fenced on a lease that expires sooner (zero: one try, no retry)."""
    lease = transition.before.lease
    if transition.fence is None or lease is None or lease.token != transition.fence:
        return DEFAULT_BUDGET
    left = lease.expires_at - now - LEASE_MARGIN
    return max(timedelta(0), min(DEFAULT_BUDGET, left))


def call_again(
    request: Callable[[A], R],
    argument: A,
    failure: StorageUnavailable,
    started: float,
    budget: timedelta,
) -> R:
    """``request(argument)`` called again after its first call, made at ``started``
    (:func:`time.monotonic`), failed with ``failure``: while ``budget`` (counted from
    ``started``) lasts, at most :data:`MAX_TRIES` calls in all, waiting :data:`BACKOFF`
    between them; the last failure is raised.

    The executors make the first call themselves (``retried``): tenacity costs more than
    the request's own CPU, so it takes over only once that call has failed, and counts it
    as its first attempt."""
    failed: list[BaseException] = [failure]

    def again(argument: A) -> R:  # the first call's failure, then the calls after it
        if failed:
            raise failed.pop()
        return request(argument)

    return Retrying(retry=UNAVAILABLE, stop=_stop(budget, started), wait=BACKOFF, reraise=True)(
        again, argument
    )


async def call_again_async(
    request: Callable[[A], Awaitable[R]],
    argument: A,
    failure: StorageUnavailable,
    started: float,
    budget: timedelta,
) -> R:
    """:func:`call_again` for an async ``request``."""
    failed: list[BaseException] = [failure]

    async def again(argument: A) -> R:
        if failed:
            raise failed.pop()
        return await request(argument)

    return await AsyncRetrying(
        retry=UNAVAILABLE, stop=_stop(budget, started), wait=BACKOFF, reraise=True
    )(again, argument)


def default_budget() -> timedelta:
    """The budget of a read, a claim and a write not fenced on a lease."""
    return DEFAULT_BUDGET


def _stop(budget: timedelta, started: float) -> stop_base:
    """When the calls after a first one made at ``started`` stop: at :data:`MAX_TRIES` in
    all, or when the budget's time left from then is spent."""
    left = max(0.0, budget.total_seconds() - (monotonic() - started))
    return stop_after_attempt(MAX_TRIES) | stop_after_delay(left)
