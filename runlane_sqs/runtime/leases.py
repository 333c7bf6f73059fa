"""Keeps the leases of in-flight attempts alive from a background thread."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Run
from runlane_sqs.engine.leases import LeaseBook
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.worker")


class LeaseKeeper(LeaseBook):
    """Renews every tracked lease on :meth:`beat`; a background thread beats every
    third of the lease duration."""

    def __init__(self, store: RunStore, clock: Clock, duration: timedelta) -> None:
        super().__init__(clock, duration)
        self._store = store
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Renew every tracked lease once."""
        for attempt, lease in self.renewals():
            renewal: Run | RunlaneError
            try:
                renewal = self._store.renew_lease(attempt.run, lease)
            except RunlaneError as exc:
                renewal = exc
            self.settle(attempt, renewal)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="runlane-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            try:
                self.beat()
            except Exception:  # the heartbeat thread must outlive any one failure
                log.exception("heartbeat failed")
