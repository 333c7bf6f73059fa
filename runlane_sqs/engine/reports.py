"""What a maintenance pass reports: one :class:`JobReport` per job, in a
:class:`PassReport` that is also logged, as the ``report`` field of one line
(docs/operations.md, "The pass report")."""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from runlane_sqs.core.errors import StorageError
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import EventType
from runlane_sqs.ports.health import HealthStore, PassRecord

log = logging.getLogger("runlane_sqs.maintenance")


@dataclass
class JobReport:
    """What one job did in one pass."""

    examined: int = 0
    """Candidates read from the index."""
    acted: int = 0
    """Conditional writes that succeeded."""
    published: int = 0
    """Wakeups sent."""
    skipped: int = 0
    """Candidates no longer eligible (changed since they were listed, or not yet due)."""
    conflicts: int = 0
    """Writes lost to a concurrent change (another pass, a worker, an operator)."""


@dataclass
class DueReport(JobReport):
    """What the ``due_wakeups`` job did in one pass: a job report and the runs whose
    republish it held back."""

    in_line: int = 0
    """Due runs not republished because their wakeup is still waiting in its queue's
    backlog (listed again later; docs/concepts.md, "Lost wakeups")."""
    stranded: dict[str, int] = field(default_factory=dict)
    """Due runs of tasks with ``pin_version`` that no worker of their app version has
    claimed for ``stranded_after``, by that version (docs/versions.md, "Pinning")."""


@dataclass
class SlotsReport(JobReport):
    """What the ``slots`` job did in one pass: a job report and the holders it dropped."""

    repaired: int = 0
    """Slot holders dropped because their attempt no longer held its lease (0 unless
    something failed between two writes)."""


@dataclass
class PassReport:
    """The typed result of :meth:`Maintenance.run_pass` (also logged as JSON)."""

    started_at: str
    pass_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """Names the pass in its log line and in the first event of the runs its schedules
    create."""
    duration_ms: int = 0
    jobs: dict[str, JobReport] = field(default_factory=dict)
    cursors: dict[str, str] = field(default_factory=dict)
    """Where each partition's scan stopped; absent when it reached the end."""
    out_of_time: bool = False

    def job(self, name: str) -> JobReport:
        kind = {JOB_SLOTS: SlotsReport, JOB_DUE: DueReport}.get(name, JobReport)
        return self.jobs.setdefault(name, kind())

    @property
    def due(self) -> DueReport:
        """The ``due_wakeups`` job's report."""
        job = self.job(JOB_DUE)
        assert isinstance(job, DueReport)
        return job

    @property
    def slots(self) -> SlotsReport:
        """The ``slots`` job's report."""
        job = self.job(JOB_SLOTS)
        assert isinstance(job, SlotsReport)
        return job

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


JOB_DUE = "due_wakeups"
JOB_EXPIRED = "expired_leases"
JOB_DEADLINES = "attempt_deadlines"
JOB_CANCELLATIONS = "abandoned_cancellations"
JOB_WAITS = "wait_checks"
JOB_TOKENS = "tokens"
JOB_PARKED = "parked_runs"
JOB_SCHEDULES = "schedules"
JOB_SLOTS = "slots"
JOB_GROUPS = "groups"
JOB_OBJECTS = "objects"
JOB_RATES = "rate_limits"
JOB_BULK = "bulk_operations"
"""Bulk operations whose lease expired: examined, carried on (acted), held again by a
process (skipped) or taken first by another (conflicts)."""
JOBS = (
    JOB_DUE,
    JOB_EXPIRED,
    JOB_DEADLINES,
    JOB_CANCELLATIONS,
    JOB_WAITS,
    JOB_TOKENS,
    JOB_SCHEDULES,
    JOB_SLOTS,
    JOB_GROUPS,
    JOB_OBJECTS,
    JOB_RATES,
    JOB_PARKED,
    JOB_BULK,
)


def job_of(transition: Transition) -> str:
    """Which job a lease-scan transition belongs to, by the first event it appends."""
    kinds = {event.type for event in transition.events}
    if EventType.ATTEMPT_TIMED_OUT in kinds:
        return JOB_DEADLINES
    if EventType.CANCELLED in kinds:
        return JOB_CANCELLATIONS
    return JOB_EXPIRED


def pass_counts(report: PassReport) -> dict[str, int]:
    """What a pass did to runs, by action (the ``runlane.maintenance.runs`` metric)."""
    jobs = report.jobs.values()
    return {
        "published": sum(job.published for job in jobs),
        "recovered": report.job(JOB_EXPIRED).acted,
        "timed_out": report.job(JOB_DEADLINES).acted,
        "cancelled": report.job(JOB_CANCELLATIONS).acted,
        "scheduled": report.job(JOB_SCHEDULES).acted,
        "conflicts": sum(job.conflicts for job in jobs),
    }


def log_pass(report: PassReport, counts: dict[str, int]) -> None:
    """The pass's one log line: its figures (:func:`pass_counts`) in words, the whole
    report as ``report``."""
    log.info(
        "maintenance pass %s: %s in %d ms%s",
        report.pass_id,
        ", ".join(f"{action.replace('_', ' ')} {n}" for action, n in counts.items()),
        report.duration_ms,
        " (out of time)" if report.out_of_time else "",
        extra={"pass_id": report.pass_id, "report": report.to_json()},
    )


def keep_pass(
    store: HealthStore, report: PassReport, counts: dict[str, int], finished_at: datetime
) -> None:
    """Store the pass's report for the console and ``app.health``. A pass that did its
    work is not failed by this write: a lost one is logged."""
    record = PassRecord(report.pass_id, finished_at, counts, report.to_json())
    try:
        store.save_pass(record)
    except StorageError as exc:
        log.warning(
            "maintenance pass %s: its report was not stored: %s",
            report.pass_id,
            exc,
            extra={"pass_id": report.pass_id},
        )
