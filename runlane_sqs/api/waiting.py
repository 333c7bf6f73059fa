"""Waiting for a run to finish from the caller's side: ``app.runs.wait`` and
``app.runs.wait_async`` (and ``runlane-sqs runs wait``).

The caller polls the run with a strongly consistent read: first after
``POLL_FIRST_SECONDS``, then at intervals that double up to ``POLL_MAX_SECONDS``. Each
poll is one ``GetItem``: a run that takes a minute costs about 17 reads, an hour about
730. Waiting inside a task is different: use ``ctx.wait_for_run``, which releases the
worker instead of polling (docs/waits.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, RunWaitTimedOut
from runlane_sqs.core.model import Run

POLL_FIRST_SECONDS = 0.1
POLL_MAX_SECONDS = 5.0


def poll_delays(
    first: float = POLL_FIRST_SECONDS, most: float = POLL_MAX_SECONDS
) -> Iterator[float]:
    """The waits between polls: ``first``, doubling, at most ``most`` each."""
    delay = first
    while True:
        yield delay
        delay = min(most, delay * 2)


def _deadline(timeout: Duration | None) -> float | None:
    if timeout is None:
        return None
    seconds = to_timedelta(timeout, "timeout").total_seconds()
    if seconds < 0:
        raise ConfigurationError("timeout must not be negative")
    return time.monotonic() + seconds


def wait_for(
    read: Callable[[], Run],
    timeout: Duration | None,
    sleep: Callable[[float], None] = time.sleep,
) -> Run:
    """Poll ``read`` until the run is terminal; raise :class:`RunWaitTimedOut` after
    ``timeout`` (``None``: wait as long as it takes)."""
    deadline = _deadline(timeout)
    for delay in poll_delays():
        run = read()
        if run.is_terminal:
            return run
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise RunWaitTimedOut(run)
        sleep(delay if left is None else min(delay, left))
    raise AssertionError("poll_delays never ends")  # pragma: no cover


async def wait_for_async(
    read: Callable[[], Awaitable[Run]],
    timeout: Duration | None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Run:
    """:func:`wait_for` for the event loop: ``read`` is awaited, so is the wait."""
    deadline = _deadline(timeout)
    for delay in poll_delays():
        run = await read()
        if run.is_terminal:
            return run
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise RunWaitTimedOut(run)
        await sleep(delay if left is None else min(delay, left))
    raise AssertionError("poll_delays never ends")  # pragma: no cover
