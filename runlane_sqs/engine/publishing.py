"""Publishing wakeups for runs, and what happens when SQS refuses one.

A refused wakeup loses nothing: the run stays in DynamoDB, listed as due now, and the
next maintenance pass publishes it, so no run is lost between DynamoDB and SQS
(docs/concepts.md, "Delays, and runs due more than 15 minutes ahead").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.recovery import publish_failed
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import WakeupTransport

log = logging.getLogger("runlane_sqs")


class Publisher:
    """Sends wakeups through the app's transport and repairs refusals in its store."""

    def __init__(self, store: RunStore, transport: WakeupTransport, clock: Clock) -> None:
        self._store = store
        self._transport = transport
        self._clock = clock

    def wakeups(
        self,
        runs: Sequence[Run],
        trace: str | None = None,
        delay: timedelta | None = None,
        now: datetime | None = None,
    ) -> list[Wakeup]:
        """Fresh wakeups for ``runs``, requested for ``now`` (default: the clock's) plus
        the ``delay`` they are sent with (the lag metric counts from then), carrying
        ``trace`` (the context of the span that sends them) or else each run's own."""
        requested_at = (now or self._clock.now()) + (delay or timedelta(0))
        return [Wakeup.for_run(run, requested_at, trace) for run in runs]

    def publish_many(
        self,
        runs: Sequence[Run],
        *,
        delay: timedelta | None = None,
        trace: str | None = None,
        now: datetime | None = None,
    ) -> int:
        """Publish wakeups in batches of ten; returns how many were sent."""
        wakeups = self.wakeups(runs, trace, delay, now)
        return len(runs) - len(self.send(runs, wakeups, delay))

    def send(
        self, runs: Sequence[Run], wakeups: list[Wakeup], delay: timedelta | None
    ) -> Sequence[Wakeup]:
        """Send the ``wakeups`` of ``runs`` as they are; returns those not sent (their
        runs are marked for the next maintenance pass)."""
        unsent = self._transport.publish(wakeups, delay)
        self.settle(runs, unsent)
        return unsent

    def publish_new(self, runs: Sequence[Run]) -> None:
        """Publish wakeups of new runs due within SQS's delay limit (``wake_at`` set);
        later ones are published by maintenance when due."""
        now = self._clock.now()
        by_delay: dict[int, list[Run]] = {}
        for run in runs:
            if run.wake_at is None or run.due_at is None:
                continue
            delay_ms = max(0, int((run.due_at - now).total_seconds() * 1000))
            by_delay.setdefault(delay_ms, []).append(run)
        for delay_ms, group in by_delay.items():
            self.publish_many(group, delay=timedelta(milliseconds=delay_ms), now=now)

    def settle(self, runs: Sequence[Run], unsent: Sequence[Wakeup]) -> int:
        """After a send: mark the runs whose wakeup was not sent; returns how many were."""
        failed = {wakeup.run_id for wakeup in unsent}
        for run in runs:
            if run.id in failed:
                self.mark_unpublished(run)
        return len(runs) - len(failed)

    def mark_unpublished(self, run: Run) -> None:
        """Best effort: list the run as due now so the next maintenance pass publishes it."""
        log.warning(
            "wakeup for run %s not published now; it stays %s and maintenance publishes it",
            run.id,
            run.status.value,
            extra={"run_id": run.id, "task": run.task},
        )
        decision = publish_failed(run)
        if isinstance(decision, Transition):
            try:
                self._store.apply(decision)
            except RunlaneError as exc:
                log.info(
                    "run %s keeps its republish time: %s", run.id, exc, extra={"run_id": run.id}
                )
