"""Maintenance's wakeups: gathered across a pass's pages, sent in batches of ten, each
in its run's trace (a ``publish`` span linked to the pass; docs/observability.md)."""

from __future__ import annotations

from datetime import timedelta

from runlane_sqs.core.model import Run
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.reports import JobReport
from runlane_sqs.ports.telemetry import Span

PendingWakeup = tuple[Run, JobReport, timedelta | None]
"""A run to publish, the job to credit and the SQS delay of its wakeup."""
PUBLISH_BATCH = 10
"""Wakeups gathered across pages before they are sent (SQS's batch size)."""


class Republisher:
    """Sends the wakeups one maintenance pass calls for."""

    def __init__(self, publisher: Publisher, observer: Observer, pass_span: Span) -> None:
        self._publisher = publisher
        self._observer = observer
        self._pass = pass_span
        self.pending: list[PendingWakeup] = []

    def add(self, wakeups: list[PendingWakeup]) -> None:
        """Gather ``wakeups``; send what is gathered once it fills a batch."""
        self.pending.extend(wakeups)
        if len(self.pending) >= PUBLISH_BATCH:  # a full SendMessageBatch or more
            self.send()

    def send(self) -> None:
        """Send what is gathered, one request per ten runs of one job and delay."""
        groups: dict[tuple[int, timedelta | None], list[tuple[Run, JobReport]]] = {}
        for run, job, delay in self.pending:
            groups.setdefault((id(job), delay), []).append((run, job))
        self.pending = []
        for (_, delay), members in groups.items():
            runs = [run for run, _ in members]
            members[0][1].published += self._send(runs, delay)

    def _send(self, runs: list[Run], delay: timedelta | None) -> int:
        if not self._observer.tracing:
            return self._publisher.publish_many(runs, delay=delay)
        spans = [self._observer.republish(run, self._pass) for run in runs]
        traced = [
            wakeup
            for run, span in zip(runs, spans, strict=True)
            for wakeup in self._publisher.wakeups([run], span.trace, delay)
        ]
        unsent = {w.run_id for w in self._publisher.send(runs, traced, delay)}
        for run, span in zip(runs, spans, strict=True):
            if run.id in unsent:
                span.fail("Unsent", "SQS did not take the wakeup; the next pass publishes it")
            span.end()
        return len(runs) - len(unsent)
