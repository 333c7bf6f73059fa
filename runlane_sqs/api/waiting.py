"""Waiting for a run to finish from the caller's side: ``app.runs.wait`` and
``app.runs.wait_async`` (and ``runlane-sqs runs wait``).

The caller polls the run with a strongly consistent read: first after
``POLL_FIRST_SECONDS``, then at intervals that double up to ``POLL_MAX_SECONDS``. Each
poll is one ``GetItem``: a run that takes a minute costs about 17 reads, an hour about
730. Watching a run's progress (``on_progress``) polls at most every
``POLL_WATCH_SECONDS`` instead: a minute costs about 60 reads. Waiting inside a task is
different: use ``ctx.wait_for_run``, which releases the
worker instead of polling (docs/waits.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator

from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, RunWaitTimedOut
from runlane_sqs.core.model import Run

POLL_FIRST_SECONDS = 0.1
POLL_MAX_SECONDS = 5.0
POLL_WATCH_SECONDS = 1.0
"""The longest wait between polls while the caller watches the run's progress."""

ProgressCallback = Callable[[Run], object]
"""Called with the run each time a poll finds its progress or state changed."""


class _Changes:
    """Calls ``callback`` with each read run whose progress or state differs from the
    previous read's (the first read's too, once it has any)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._seen: tuple[object, object] = (None, None)

    def read(self, run: Run) -> Run:
        if self._callback is not None and (run.progress, run.state) != self._seen:
            self._seen = (run.progress, run.state)
            self._callback(run)
        return run


def poll_delays(
    first: float = POLL_FIRST_SECONDS, most: float = POLL_MAX_SECONDS
) -> Iterator[float]:
    """The waits between polls: ``first``, doubling, at most ``most`` each."""
    delay = first
    while True:
        yield delay
        delay = min(most, delay * 2)


class _Polling:
    """When to read the run again: after the next backoff delay, cut to what is left of
    ``timeout``; ``None`` once the run is finished."""

    def __init__(self, timeout: Duration | None, most: float = POLL_MAX_SECONDS) -> None:
        seconds = None if timeout is None else to_timedelta(timeout, "timeout").total_seconds()
        if seconds is not None and seconds < 0:
            raise ConfigurationError("timeout must not be negative")
        self._deadline = None if seconds is None else time.monotonic() + seconds
        self._delays = poll_delays(most=most)

    def delay_after(self, run: Run) -> float | None:
        """Raises :class:`RunWaitTimedOut` when the time is up and ``run`` is not done."""
        if run.is_terminal:
            return None
        delay = next(self._delays)
        if self._deadline is None:
            return delay
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise RunWaitTimedOut(run)
        return min(delay, left)


def wait_for(
    read: Callable[[], Run],
    timeout: Duration | None,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: ProgressCallback | None = None,
) -> Run:
    """Poll ``read`` until the run is terminal; raise :class:`RunWaitTimedOut` after
    ``timeout`` (``None``: wait as long as it takes). ``on_progress`` is called with the
    run at each poll that finds its progress or state changed."""
    polling = _Polling(timeout, POLL_MAX_SECONDS if on_progress is None else POLL_WATCH_SECONDS)
    changes = _Changes(on_progress)
    while (delay := polling.delay_after(run := changes.read(read()))) is not None:
        sleep(delay)
    return run


async def wait_for_async(
    read: Callable[[], Awaitable[Run]],
    timeout: Duration | None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    on_progress: ProgressCallback | None = None,
) -> Run:
    """:func:`wait_for` for the event loop: ``read`` is awaited, so is the wait
    (``sleep``, by default ``asyncio.sleep``)."""
    import asyncio  # noqa: PLC0415 (loaded already: this runs on an event loop)

    pause: Callable[[float], Awaitable[None]] = sleep or asyncio.sleep
    polling = _Polling(timeout, POLL_MAX_SECONDS if on_progress is None else POLL_WATCH_SECONDS)
    changes = _Changes(on_progress)
    while (delay := polling.delay_after(run := changes.read(await read()))) is not None:
        await pause(delay)
    return run
