"""Heartbeats of the async worker: the decisions of
:class:`~runlane_sqs.runtime.executor.LeaseBook`, renewals sent concurrently on the
event loop."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.ports.aio import AsyncRunStore
from runlane_sqs.runtime.executor import LeaseBook, TrackedAttempt

log = logging.getLogger("runlane_sqs.worker")


class AsyncLeaseKeeper(LeaseBook):
    """Renews every tracked lease every third of the lease duration, in a loop task."""

    def __init__(self, store: AsyncRunStore, clock: Clock, duration: timedelta) -> None:
        super().__init__(clock, duration)
        self._store = store
        self._task: asyncio.Task[None] | None = None

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

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="runlane-heartbeat"
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                await self.beat()
            except Exception:  # the heartbeat must outlive any one failure
                log.exception("heartbeat failed")
