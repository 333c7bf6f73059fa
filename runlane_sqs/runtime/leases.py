"""Keeps the leases of in-flight attempts alive from a background thread."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.engine.leases import LeaseBook, TrackedAttempt
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
        """Renew every tracked lease once. Several renewals go out at once, each on a
        thread of its own, so one held up by the AWS SDK's retries while DynamoDB fails
        does not delay the others' (the async keeper sends them concurrently too)."""
        due = self.renewals()
        if len(due) == 1:
            self._renew(*due[0])
            return
        threads = [
            threading.Thread(
                target=self._renew, args=pair, name="runlane-heartbeat-renewal", daemon=True
            )
            for pair in due
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _renew(self, attempt: TrackedAttempt, lease: Lease) -> None:
        if not self.tracks(attempt):
            return  # it finished since the snapshot; its outcome write ended the lease
        renewal: Run | RunlaneError
        try:
            renewal = self._store.renew_lease(attempt.run, lease)
        except RunlaneError as exc:
            renewal = exc
        except Exception:  # a renewal thread must not end with an unlogged error
            log.exception("heartbeat failed")
            return
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
