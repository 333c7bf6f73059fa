"""Keeps the leases of in-flight attempts alive, and notices when one is lost."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from runlane_sqs.clock import Clock
from runlane_sqs.context import TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.errors import LeaseLost, RunlaneError
from runlane_sqs.ports import RunStore

log = logging.getLogger("runlane_sqs.worker")


@dataclass
class _Attempt:
    run: Run
    ctx: TaskContext
    lost: bool = False


class LeaseKeeper:
    """Renews every tracked lease on :meth:`beat`; a background thread beats every
    third of the lease duration. A refused renewal marks the attempt lost and sets its
    cancellation event; a renewal that shows ``cancel_requested`` sets it too."""

    def __init__(self, store: RunStore, clock: Clock, duration: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._duration = duration
        self._attempts: dict[str, _Attempt] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_seconds(self) -> float:
        return self._duration.total_seconds() / 3

    def track(self, run: Run, ctx: TaskContext) -> None:
        with self._lock:
            self._attempts[run.id] = _Attempt(run, ctx)

    def untrack(self, run_id: str) -> tuple[Run, bool] | None:
        """Stop renewing; returns the latest known run and whether the lease was lost."""
        with self._lock:
            attempt = self._attempts.pop(run_id, None)
        return (attempt.run, attempt.lost) if attempt else None

    def current(self, run_id: str) -> Run | None:
        """The latest known state of a tracked attempt's run."""
        with self._lock:
            attempt = self._attempts.get(run_id)
            return attempt.run if attempt else None

    def update(self, run: Run) -> None:
        """Remember a state the attempt itself wrote (a recorded step)."""
        with self._lock:
            attempt = self._attempts.get(run.id)
            if attempt is not None:
                attempt.run = run

    def contexts(self) -> list[TaskContext]:
        with self._lock:
            return [a.ctx for a in self._attempts.values()]

    def beat(self) -> None:
        """Renew every tracked lease once."""
        with self._lock:
            attempts = [a for a in self._attempts.values() if not a.lost]
        for attempt in attempts:
            self._renew(attempt)

    def _renew(self, attempt: _Attempt) -> None:
        run = attempt.run
        assert run.lease is not None
        try:
            lease = machine.renew_lease(
                run, token=run.lease.token, now=self._clock.now(), duration=self._duration
            )
            current = self._store.renew_lease(run, lease)
        except LeaseLost:
            attempt.lost = True
            attempt.ctx.cancellation.set()
            attempt.ctx.log.warning("lease lost; the attempt's writes will be refused")
            return
        except RunlaneError as exc:
            attempt.ctx.log.warning("lease renewal failed, will retry: %s", exc)
            return
        attempt.run = current
        if attempt.ctx.cancelled:
            return
        if current.status is RunStatus.CANCEL_REQUESTED:
            attempt.ctx.log.info("cancellation requested")
            attempt.ctx.cancellation.set()
        elif current.deadline_at is not None and current.deadline_at <= self._clock.now():
            attempt.ctx.log.warning("attempt passed its deadline; asking the handler to stop")
            attempt.ctx.cancellation.set()

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
