"""How far each queue's consumers have come, sampled once per queue and maintenance
pass, so a republish is held back while a run's wakeup is only waiting in line.

A runnable run whose wakeup was published and has not been claimed by its republish
time has either lost its wakeup (deleted unhandled, moved to the dead-letter queue,
expired) or is waiting behind a backlog. The queue's counts tell them apart: once the
queue is seen with no visible or delayed message, every wakeup that became visible
before (less the time SQS's counts take to settle) has been received. Maintenance keeps
that time per queue beside its cursors (``DRAINED#{queue}``), and republishes only runs
whose wakeup became visible before it; the others are listed again later, at most
``republish_max`` after their wakeup became visible (docs/concepts.md, "Lost wakeups").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.machine import RepublishPolicy
from runlane_sqs.core.recovery import QueueLine
from runlane_sqs.ports.store import ProgressStore
from runlane_sqs.ports.transport import BacklogProbe

log = logging.getLogger("runlane_sqs.maintenance")
COUNTS_SETTLE = timedelta(minutes=1)
"""How long SQS's approximate counts may take to include a message sent (AWS: about a
minute); a drained queue vouches only for wakeups visible this long before. A shorter
``republish_after`` shortens it to that (a duplicate wakeup is the price)."""


class QueueProgress:
    """How far each queue's consumers have come, at one pass: each queue's :class:`QueueLine`,
    counted on first use."""

    def __init__(
        self,
        progress: ProgressStore,
        probe: BacklogProbe | None,
        policy: RepublishPolicy,
        now: datetime,
    ) -> None:
        self._progress = progress
        self._probe = probe
        self._settle = min(COUNTS_SETTLE, policy.after)
        self._now = now
        self._lines: dict[str, QueueLine | None] = {}
        self._drained: dict[str, datetime] | None = None

    def sample(self, queues: Iterable[str]) -> None:
        """Count ``queues`` now, so each pass records whether they were drained."""
        for queue in queues:
            self.line(queue)

    def line(self, queue: str) -> QueueLine | None:
        """``queue``'s line; ``None`` when it cannot be known (no probe, or counting
        failed): the run's republish is then not held back."""
        if queue not in self._lines:
            self._lines[queue] = self._count(queue)
        return self._lines[queue]

    def _count(self, queue: str) -> QueueLine | None:
        if self._probe is None:
            return None
        try:
            drained = self._load().get(queue)
            backlog = self._probe.backlog(queue)
            if backlog.drained:
                at = truncate_ms(self._now - self._settle)
                if drained is None or drained < at:
                    self._progress.save_drained(queue, at)
                    drained = at
        except RunlaneError as exc:
            log.warning(
                "cannot tell whether queue %r has a backlog (%s); its due runs are "
                "republished as if it had none",
                queue,
                exc,
            )
            return None
        return QueueLine(drained_at=drained)

    def _load(self) -> dict[str, datetime]:
        if self._drained is None:
            self._drained = self._progress.load_drained()
        return self._drained
