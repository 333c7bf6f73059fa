"""Reading an environment's health: ``app.health`` (what the console's runs and health
pages show).

Every read is bounded: one page of each index partition it looks at and one
``GetQueueAttributes`` per queue, so what a call costs does not grow with the number of
runs stored (docs/console.md, "What the pages cost").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.health import GROUPS, OUTCOMES, Activity, Count, activity
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.health import PassRecord
from runlane_sqs.ports.transport import BacklogProbe, DeadLetterProbe, QueueBacklog

log = logging.getLogger("runlane_sqs.health")
TALLIED_PER_PARTITION = 500
"""Runs read from each status-index partition for the counts and the chart: a status
with more runs created in the window than this times its partitions (16 for each
terminal status) is counted over a shorter, stated window."""
OVERDUE_PER_PARTITION = 100
"""Agenda entries counted in each of the 32 run partitions; more show as ``N+``."""
STALE_PASSES = 3
"""A last pass older than this many maintenance periods is shown as stale."""


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """One queue's messages now, as SQS counts them (approximate)."""

    name: str
    backlog: QueueBacklog | None
    """``None``: not counted (``problem`` says why)."""
    dead_letters: int | None
    """Messages in its dead-letter queue (``None``: none, or not counted)."""
    problem: str | None = None

    def to_json(self) -> dict[str, object]:
        backlog = self.backlog
        return {
            "name": self.name,
            "visible": backlog.visible if backlog else None,
            "delayed": backlog.delayed if backlog else None,
            "in_flight": backlog.in_flight if backlog else None,
            "dead_letters": self.dead_letters,
            "problem": self.problem,
        }


@dataclass(frozen=True, slots=True)
class Health:
    """The last maintenance pass, what maintenance has to do now, and the queues."""

    checked_at: datetime
    last_pass: PassRecord | None
    stale: bool
    """No pass finished within :data:`STALE_PASSES` maintenance periods."""
    overdue: Count
    """Unfinished runs due a wakeup or past their lease or deadline (maintenance's next
    work; normally near zero)."""
    queues: tuple[QueueHealth, ...]

    def to_json(self) -> dict[str, object]:
        last = self.last_pass
        return {
            "checked_at": self.checked_at.isoformat(),
            "last_pass": None
            if last is None
            else {
                "pass_id": last.pass_id,
                "finished_at": last.finished_at.isoformat(),
                "counts": last.counts,
                "report": last.report,
            },
            "stale": self.stale,
            "overdue": self.overdue.to_json(),
            "queues": [queue.to_json() for queue in self.queues],
        }


class HealthApi:
    """``app.health``: bounded reads of the environment for operators."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def activity(self, window: timedelta = timedelta(hours=1)) -> Activity:
        """Runs created in the last ``window``, by status group, the outcomes per minute
        (by creation minute), and the unfinished and parked runs of any age."""
        if not timedelta(minutes=1) <= window <= timedelta(days=1):
            raise RunlaneError("the activity window is from 1 minute to 1 day")
        now = self._engine.clock.now()
        since = now - window
        groups = [(group, None if group not in OUTCOMES else since) for group in GROUPS]
        tallies = self._engine.store.health.tally(groups, TALLIED_PER_PARTITION)
        return activity(tallies, since, now)

    def check(self) -> Health:
        """The last pass's report, the overdue runs and each queue's messages."""
        engine = self._engine
        now = engine.clock.now()
        last = engine.store.health.last_pass()
        period = engine.config.maintenance_period
        return Health(
            checked_at=now,
            last_pass=last,
            stale=last is None or now - last.finished_at > STALE_PASSES * period,
            overdue=engine.store.health.overdue(now, OVERDUE_PER_PARTITION),
            queues=tuple(self._queue(q.name) for q in engine.tasks.defined_queues()),
        )

    def _queue(self, name: str) -> QueueHealth:
        transport = self._engine.transport
        backlog = dead = None
        try:
            if isinstance(transport, BacklogProbe):
                backlog = transport.backlog(name)
            if isinstance(transport, DeadLetterProbe):
                dead = transport.dead_letters(name)
        except RunlaneError as exc:
            log.warning("counting queue %s failed: %s", name, exc)
            return QueueHealth(name, backlog, dead, problem=str(exc))
        return QueueHealth(name, backlog, dead)
