"""Heartbeats of the async worker: the decisions of
:class:`~runlane_sqs.runtime.executor.LeaseBook`, renewals sent concurrently on the
event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.progress import DEFAULT_PROGRESS_INTERVAL_SECONDS, AttemptReport
from runlane_sqs.ports.aio import AsyncRunStore
from runlane_sqs.runtime.executor import LeaseBook, TrackedAttempt

log = logging.getLogger("runlane_sqs.worker")


class AsyncLeaseKeeper(LeaseBook):
    """Renews every tracked lease every third of the lease duration, in a loop task, and
    writes the reports due (waking earlier for one due before the next beat)."""

    def __init__(
        self,
        store: AsyncRunStore,
        clock: Clock,
        duration: timedelta,
        report_interval: timedelta = timedelta(seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS),
    ) -> None:
        super().__init__(clock, duration, report_interval)
        self._store = store
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def beat(self) -> None:
        """Renew every tracked lease once (all at the same time)."""
        await asyncio.gather(*(self._renew(a, lease) for a, lease in self.renewals()))

    async def _renew(self, attempt: TrackedAttempt, lease: Lease) -> None:
        if not self.tracks(attempt):
            return  # it finished since the snapshot; its outcome write ended the lease
        renewal: Run | RunlaneError
        try:
            renewal = await self._store.renew_lease(attempt.run, lease)
        except RunlaneError as exc:
            renewal = exc
        self.settle(attempt, renewal)

    async def flush(self) -> None:
        """Write every report due now (all at the same time)."""
        await asyncio.gather(*(self._report(a, report) for a, report in self.reports_due()))

    async def _report(self, attempt: TrackedAttempt, report: AttemptReport) -> None:
        answer: Run | RunlaneError
        try:
            answer = await self._store.report_progress(attempt.run, attempt.token or "", report)
        except RunlaneError as exc:
            answer = exc
        self.reported(attempt, report, answer)

    def start(self) -> None:
        if self._task is None:
            loop = asyncio.get_running_loop()
            wake = self._wake = asyncio.Event()

            def nudge() -> None:  # called from handler threads too
                if not loop.is_closed():
                    loop.call_soon_threadsafe(wake.set)

            self.nudge = nudge
            self._task = loop.create_task(self._loop(), name="runlane-heartbeat")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            self.nudge = None

    async def _loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        beat_at = loop.time() + self.interval_seconds
        while True:
            sleep = beat_at - loop.time()
            report_at = self.next_report_at()
            if report_at is not None:
                sleep = min(sleep, (report_at - self._clock.now()).total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(sleep, 0.0))
            self._wake.clear()
            try:
                if loop.time() >= beat_at:
                    beat_at = loop.time() + self.interval_seconds
                    await self.beat()
                await self.flush()
            except Exception:  # the heartbeat must outlive any one failure
                log.exception("heartbeat failed")
