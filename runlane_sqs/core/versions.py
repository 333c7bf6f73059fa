"""App versions under unfinished runs (pure; docs/versions.md): which code each run
started on, counted per version and task so a team knows when an old code path can go,
and which worker may run a pinned run.

A run records the version its first attempt ran under (:attr:`Run.app_version
<runlane_sqs.core.model.Run.app_version>`), each attempt the version that ran it. A run
that has not started yet has no version: the worker that first claims it gives it one.
A task with ``pin_version`` keeps each run on that version: a worker of another one
sends the wakeup back (:func:`pinned_elsewhere`, :func:`pinned_retry_delay`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import JSON, TERMINAL_STATUSES, Run, RunStatus

UNFINISHED_STATUSES = tuple(s for s in RunStatus if s not in TERMINAL_STATUSES)
"""The statuses a run can be in before it finishes: what a version count reads."""


@dataclass(frozen=True, slots=True)
class VersionCount:
    """The unfinished runs of ``task`` that started under ``app_version``."""

    app_version: str | None
    """``None``: runs that started with no version recorded (before versions were
    recorded, or under code with no configured or installed version)."""
    task: str
    statuses: dict[str, int]
    """How many are in each status (only the statuses some run is in)."""

    @property
    def runs(self) -> int:
        return sum(self.statuses.values())

    def to_json(self) -> dict[str, JSON]:
        return {
            "app_version": self.app_version,
            "task": self.task,
            "runs": self.runs,
            "statuses": dict(self.statuses),
        }


@dataclass(frozen=True, slots=True)
class VersionReport:
    """Unfinished runs by the version they started under and their task."""

    counts: list[VersionCount]
    """Ordered by version, then task (runs with no version recorded first)."""
    not_started: dict[str, int] = field(default_factory=dict)
    """Runs of each task that no attempt has started yet (they take the version of the
    worker that first claims them)."""

    @property
    def versions(self) -> list[str]:
        """The versions some unfinished run started under."""
        return sorted({c.app_version for c in self.counts if c.app_version is not None})

    def to_json(self) -> dict[str, JSON]:
        return {
            "versions": list(self.versions),
            "counts": [c.to_json() for c in self.counts],
            "not_started": dict(self.not_started),
        }


def count_versions(runs: Iterable[Run]) -> VersionReport:
    """The report of ``runs`` (the unfinished ones; a finished run is left out)."""
    counted: dict[tuple[str | None, str], Counter[str]] = {}
    not_started: Counter[str] = Counter()
    for run in runs:
        if run.is_terminal:
            continue
        if run.attempt == 0:
            not_started[run.task] += 1
            continue
        counted.setdefault((run.app_version, run.task), Counter())[run.status.value] += 1
    order = sorted(counted, key=lambda key: (key[0] is not None, key[0] or "", key[1]))
    counts = [VersionCount(v, t, dict(sorted(counted[v, t].items()))) for v, t in order]
    return VersionReport(counts, dict(sorted(not_started.items())))


SHORTEST_PIN_DELAY = timedelta(seconds=5)
"""The first delay of a pinned run's wakeup sent again for a worker of its version."""


def pinned_elsewhere(run: Run, app_version: str | None, now: datetime) -> bool:
    """Whether a worker of ``app_version`` leaves ``run`` (of a task with
    ``pin_version``) to a worker of the version it started under: it started under
    another one (a run that has not started, or recorded none, is anyone's) and a worker
    of that version could claim it now (otherwise it is skipped as any worker would)."""
    if run.app_version is None or run.app_version == app_version:
        return False
    return run.status.is_runnable and run.is_due(now)


def pinned_retry_delay(run: Run, now: datetime) -> timedelta:
    """When the wakeup of a run left to a worker of its version comes back: half as long
    as the run has been due, from 5 s to SQS's 15 minutes. Each return is later than the
    last (no busy loop while no such worker runs), and each is a new message, so the
    queue's receive count never sends it to the dead-letter queue."""
    waited = now - run.due_at if run.due_at is not None else timedelta(0)
    return min(max(waited / 2, SHORTEST_PIN_DELAY), timedelta(seconds=MAX_DELAY_SECONDS))
