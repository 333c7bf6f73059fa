"""Unparking: parked runs become runnable again once someone can run their task.

The decisions are in :mod:`runlane_sqs.core.parking`; a worker parks a run in the
per-message path (:mod:`runlane_sqs.engine.message`). This service finds parked runs
on the status index (never a table Scan) and unparks them: those a worker can run when
it starts, and those the maintenance app registers once per ``republish_after``
(an operator's unpark is ``app.runs.unpark``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError
from runlane_sqs.core.model import JSON, Run, RunStatus
from runlane_sqs.core.parking import OPERATOR_UNPARKS, parked_long_enough, unpark
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.ports.store import RunQuery, RunStore

log = logging.getLogger("runlane_sqs")
PARKED_PAGE_SIZE = 100
"""Parked runs asked for in one page of ``list_runs``."""


@dataclass(frozen=True, slots=True)
class UnparkReport:
    examined: int
    unparked: int
    more: bool
    """Parked runs may remain beyond the limit."""


class Parking:
    """Finds parked runs and makes them runnable again, publishing their wakeups."""

    def __init__(
        self,
        *,
        store: RunStore,
        publisher: Publisher,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._tasks = tasks
        self._clock = clock
        self._config = config

    def unpark_known(
        self,
        *,
        by: str,
        queues: Collection[str] | None = None,
        parked_for: timedelta | None = None,
        limit: int = 1000,
    ) -> UnparkReport:
        """Unpark parked runs whose task this app registers (and, with ``queues``, whose
        queue is one of them), oldest first, examining at most ``limit`` runs.

        ``parked_for`` leaves runs parked more recently than that (maintenance uses
        ``republish_after``, so runs that workers park again are not churned)."""
        known = set(self._tasks.names())
        examined = 0
        unparked: list[Run] = []
        cursor: str | None = None
        query = RunQuery(statuses=(RunStatus.PARKED,))
        while known and examined < limit:
            page, cursor = self._store.list_runs(
                query, min(PARKED_PAGE_SIZE, limit - examined), cursor
            )
            examined += len(page)
            now = self._clock.now()
            for run in page:
                if run.task not in known or (queues is not None and run.queue not in queues):
                    continue
                if run.parked_reason in OPERATOR_UNPARKS:
                    continue  # the code this app runs is the code that stopped it
                if parked_for is not None and not parked_long_enough(
                    run, now=now, interval=parked_for
                ):
                    continue
                stored = self._try_unpark(run, {"by": by, "reason": "task registered"})
                if stored is not None:
                    unparked.append(stored)
            if cursor is None or not page:
                break
        if unparked:
            self._publisher.publish_many(unparked)
            log.info(
                "unparked %d run(s) whose task %s registers",
                len(unparked),
                by,
                extra={"unparked": [run.id for run in unparked]},
            )
        return UnparkReport(examined=examined, unparked=len(unparked), more=cursor is not None)

    def _try_unpark(self, run: Run, data: dict[str, JSON]) -> Run | None:
        """Unpark a listed run; ``None`` if it changed since it was read (the write is
        conditioned on the sequence it was listed at)."""
        if run.status is not RunStatus.PARKED:
            return None
        try:
            return self._store.apply(
                unpark(run, now=self._clock.now(), republish=self._config.republish, data=data)
            )
        except ConflictError:
            return None
