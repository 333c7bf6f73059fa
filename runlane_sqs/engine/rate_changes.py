"""Maintenance's check of the app's rate limits against those it last saw: a deploy that
raises or removes a limit takes effect within the pass (the rules are
:mod:`runlane_sqs.core.rate_deploys`; docs/rate-limits.md, "Deploying a new limit").

Each pass reads the limits it kept (one ``GetItem``) and compares them with its code's.
This app speaks only for the limits of the tasks it registers and the queues it uses;
the limits it kept of others stay as they were. When a limit was relaxed, the pass drops
the starts reserved ahead in each of its scopes (their TAT back to now; the scopes of a
per-key limit are found on the agenda, where each record lists itself once) and wakes
every run sleeping for one of them (from the agenda, up to the latest start that was
reserved); then it keeps the new limits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.model import Run
from runlane_sqs.core.rate_deploys import (
    KEY_PATTERN,
    matches,
    relaxed,
    sleeps_under,
    wake_for_new_limit,
)
from runlane_sqs.core.rates import start_time, to_epoch_us
from runlane_sqs.engine.reports import JobReport
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.maintenance")
SLEEPERS_PAGE = 100
"""Runs read per agenda page while looking for the sleepers of a relaxed limit."""


class RateChanges:
    """Applies the rate limits a deploy relaxed; :meth:`check` runs once per pass."""

    def __init__(self, *, store: RunStore, tasks: TaskRegistry, config: RunlaneConfig) -> None:
        self._store = store
        self._tasks = tasks
        self._config = config

    def check(self, now: datetime, job: JobReport) -> list[Run]:
        """Compare the code's limits with those kept; for each relaxed one, reset its
        scopes and wake its sleepers. Returns the runs woken (their wakeups to send)."""
        progress = self._store.progress
        seen = progress.load_rate_limits()
        limits = {p: s for p, s in (seen or {}).items() if not self._tasks.knows_pattern(p)}
        limits.update(self._tasks.rate_patterns())
        if seen == limits or (seen is None and not limits):  # nothing changed, or to keep
            return []
        woken = self._relax(relaxed(seen, limits), now, job) if seen is not None else []
        progress.save_rate_limits(limits)
        return woken

    def _relax(self, patterns: Sequence[str], now: datetime, job: JobReport) -> list[Run]:
        if not patterns:
            return []
        rates = self._store.rates
        keyed = any(p.startswith(KEY_PATTERN) for p in patterns)
        candidates = rates.scopes() if keyed else list(patterns)
        now_us, latest, reset = to_epoch_us(now), to_epoch_us(now), 0
        for scope in candidates:
            if not any(matches(scope, p) for p in patterns):
                continue
            record = rates.read(scope)
            if record is not None and rates.reset(scope, now_us):
                latest, reset = max(latest, record.tat_us), reset + 1
        log.info(
            "a deploy raised or removed the rate limits %s: the starts reserved ahead in "
            "%d of their scopes are dropped, and their sleeping runs reserve again",
            ", ".join(patterns),
            reset,
        )
        until = start_time(latest) + self._config.republish.max_after
        return self._wake(patterns, until, now, job)

    def _wake(
        self, patterns: Sequence[str], until: datetime, now: datetime, job: JobReport
    ) -> list[Run]:
        """Every run listed up to ``until`` that sleeps under one of ``patterns``, woken."""
        woken: list[Run] = []
        for partition in self._store.agenda_partitions(AgendaKind.RUN):
            cursor: str | None = None
            while True:
                runs, cursor = self._store.agenda_page(partition, until, SLEEPERS_PAGE, cursor)
                for run in runs:
                    pattern = next((p for p in patterns if sleeps_under(run, p)), None)
                    if pattern is None:
                        continue
                    job.examined += 1
                    decision = wake_for_new_limit(
                        run, pattern, now=now, republish=self._config.republish
                    )
                    try:
                        woken.append(self._store.apply(decision))
                    except ConflictError:
                        job.conflicts += 1
                    else:
                        job.acted += 1
                if cursor is None:
                    break
        return woken
