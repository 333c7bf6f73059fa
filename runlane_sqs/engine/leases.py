"""The in-flight attempts of one worker and what each lease renewal means for them.

No I/O: the runtime's lease keepers (a thread, an asyncio task) send the renewals."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import LeaseLost, RunlaneError
from runlane_sqs.core.model import Lease, Run, RunStatus
from runlane_sqs.engine.context import TaskContext


@dataclass
class TrackedAttempt:
    """One in-flight attempt: the latest known run, its context, whether its lease is lost."""

    run: Run
    ctx: TaskContext
    lost: bool = False


class LeaseBook:
    """The in-flight attempts of one worker and what a renewal means for each (no I/O).

    A refused renewal of an attempt still in flight marks it lost and sets its
    cancellation; a renewal that shows ``cancel_requested``, or an attempt past its
    deadline, sets it too. What a renewal returns for an attempt that finished after
    :meth:`renewals` listed it is ignored: its own outcome write ended the lease, so a
    refusal then is expected, not a lost lease. The sync :class:`LeaseKeeper` and the
    async worker's keeper differ only in how they send the renewals this book decides."""

    def __init__(self, clock: Clock, duration: timedelta) -> None:
        self._clock = clock
        self._duration = duration
        self._attempts: dict[str, TrackedAttempt] = {}
        self._lock = threading.Lock()
        self.occupancy: Callable[[bool], None] | None = None
        """Told ``True`` when an attempt starts with none in flight and ``False`` when the
        last one ends (the runtime's ECS task protection, when it runs on ECS)."""

    @property
    def interval_seconds(self) -> float:
        return self._duration.total_seconds() / 3

    def track(self, run: Run, ctx: TaskContext) -> None:
        with self._lock:
            first = not self._attempts
            self._attempts[run.id] = TrackedAttempt(run, ctx)
        if first and self.occupancy is not None:
            self.occupancy(True)

    def untrack(self, run_id: str) -> tuple[Run, bool] | None:
        """Stop renewing; returns the latest known run and whether the lease was lost."""
        with self._lock:
            attempt = self._attempts.pop(run_id, None)
            last = attempt is not None and not self._attempts
        if last and self.occupancy is not None:
            self.occupancy(False)
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

    def tracks(self, attempt: TrackedAttempt) -> bool:
        """Whether ``attempt`` is still in flight: not untracked since :meth:`renewals`
        listed it."""
        with self._lock:
            return self._attempts.get(attempt.run.id) is attempt

    def run_ids(self) -> list[str]:
        """The runs of the attempts in flight."""
        with self._lock:
            return list(self._attempts)

    def contexts(self) -> list[TaskContext]:
        with self._lock:
            return [a.ctx for a in self._attempts.values()]

    def cancel_all(self) -> None:
        """Set the cancellation of every in-flight attempt."""
        for ctx in self.contexts():
            ctx.cancellation.set()

    def renewals(self) -> list[tuple[TrackedAttempt, Lease]]:
        """The renewed lease each live attempt should write now: a snapshot, which
        :meth:`settle` checks against the attempts still in flight."""
        with self._lock:
            attempts = [a for a in self._attempts.values() if not a.lost]
        due: list[tuple[TrackedAttempt, Lease]] = []
        for attempt in attempts:
            run = attempt.run
            assert run.lease is not None
            try:
                lease = machine.renew_lease(
                    run, token=run.lease.token, now=self._clock.now(), duration=self._duration
                )
            except LeaseLost:
                self.settle(attempt, LeaseLost(run.id))
                continue
            due.append((attempt, lease))
        return due

    def settle(self, attempt: TrackedAttempt, renewal: Run | RunlaneError) -> None:
        """Take in what a renewal request returned: the stored run, or its error.

        Ignored for an attempt no longer tracked: it finished between the snapshot of
        :meth:`renewals` and this answer, and its outcome write (fenced on its own lease
        token) ended the lease. Only a refusal of an attempt still tracked is a lost
        lease, and it is marked under the lock, so :meth:`untrack` sees it."""
        with self._lock:
            in_flight = self._attempts.get(attempt.run.id) is attempt
            if in_flight and isinstance(renewal, LeaseLost):
                attempt.lost = True
        if not in_flight:
            attempt.ctx.log.debug("renewal answered after the attempt ended; ignored")
        elif isinstance(renewal, LeaseLost):
            self.lost(attempt)
        elif isinstance(renewal, RunlaneError):
            self.failed(attempt, renewal)
        else:
            self.renewed(attempt, renewal)

    @staticmethod
    def lost(attempt: TrackedAttempt) -> None:
        attempt.lost = True
        attempt.ctx.cancellation.set()
        attempt.ctx.log.warning("lease lost; the attempt's writes will be refused")

    @staticmethod
    def failed(attempt: TrackedAttempt, exc: RunlaneError) -> None:
        attempt.ctx.log.warning("lease renewal failed, will retry: %s", exc)

    def renewed(self, attempt: TrackedAttempt, current: Run) -> None:
        attempt.run = current
        if attempt.ctx.cancelled:
            return
        if current.status is RunStatus.CANCEL_REQUESTED:
            attempt.ctx.log.info("cancellation requested")
            attempt.ctx.cancellation.set()
        elif current.deadline_at is not None and current.deadline_at <= self._clock.now():
            attempt.ctx.log.warning("attempt passed its deadline; asking the handler to stop")
            attempt.ctx.cancellation.set()
