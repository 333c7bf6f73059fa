"""What the engine tells tracing and metrics: one :class:`Observer` per app, its spans
named and its measurements recorded as docs/observability.md describes.

Without a tracer that records (no OpenTelemetry provider set) every span is
:data:`NO_SPAN`, and while no metric sink records nothing is measured: the per-message
path then does a few attribute look-ups more, no I/O (docs/observability.md, "Overhead").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime

from runlane_sqs.core import telemetry as t
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.redaction import Redact, apply_redaction
from runlane_sqs.core.retry import qualified_name
from runlane_sqs.core.telemetry import Metric, SpanKind
from runlane_sqs.ports.telemetry import Attributes, MetricSink, Span, Tracer

LEASE_LOST_OUTCOME = "lease_lost"
"""The ``runlane.outcome`` of an attempt whose lease was lost before its outcome was
written (not the failure type ``LEASE_LOST`` of runlane_sqs.core.recovery)."""


class _NoSpan:
    """The span of an app without a tracer: records nothing."""

    trace = None
    trace_id = None

    def set(self, attributes: Attributes) -> None:
        pass

    def fail(self, kind: str, message: str, stacktrace: str | None = None) -> None:
        pass

    def active(self) -> AbstractContextManager[None]:
        return nullcontext()

    def end(self) -> None:
        pass


NO_SPAN: Span = _NoSpan()


@dataclass
class Observer:
    """Starts the engine's spans and records its metrics.

    ``attempts_as_children``: each attempt's span is a child of the span that triggered
    its run (one trace per run, across retries, waits and republishes); when ``False``
    each attempt starts a trace of its own, linked to the trigger's."""

    tracer: Tracer | None = None
    metrics: Sequence[MetricSink] = ()
    attempts_as_children: bool = True
    redact: Redact | None = None
    """The app's redaction hook: exception messages pass through it onto spans."""
    _sinks: tuple[MetricSink, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sinks = tuple(self.metrics)

    @property
    def tracing(self) -> bool:
        return self.tracer is not None and bool(self.tracer.enabled())

    @property
    def measuring(self) -> bool:
        """Would a measurement be recorded now? (Checked before one is put together.)"""
        return any(sink.enabled() for sink in self._sinks)

    def span(
        self,
        name: str,
        kind: SpanKind,
        attributes: Attributes,
        *,
        parent: str | None = None,
        links: Sequence[str | None] = (),
    ) -> Span:
        tracer = self.tracer
        if tracer is None or not tracer.enabled():
            return NO_SPAN
        linked = [link for link in links if link]
        return tracer.start(name, kind, attributes, parent=parent, links=linked)

    @contextmanager
    def spanning(
        self,
        name: str,
        kind: SpanKind,
        attributes: Attributes,
        *,
        parent: str | None = None,
        links: Sequence[str | None] = (),
    ) -> Iterator[Span]:
        """A span around a block: failed by what the block raises, ended after it."""
        span = self.span(name, kind, attributes, parent=parent, links=links)
        try:
            yield span
        except BaseException as exc:
            span.fail(qualified_name(exc), apply_redaction(self.redact, str(exc)))
            raise
        finally:
            span.end()

    def trigger(
        self, task: str, queue: str, *, source: Run | None = None
    ) -> AbstractContextManager[Span]:
        """The producer span around a trigger (a child of the caller's current span); a
        retry or rerun links to the run it relaunches."""
        if not self.tracing:
            return nullcontext(NO_SPAN)
        attributes = {
            **_messaging(queue, "send", t.TRIGGER),
            t.TASK: task,
            t.QUEUE: queue,
        }
        links = (source.trace,) if source is not None else ()
        return self.spanning(f"{t.TRIGGER} {task}", SpanKind.PRODUCER, attributes, links=links)

    def republish(self, run: Run, pass_span: Span) -> Span:
        """The producer span of a wakeup maintenance republishes: in the run's trace,
        linked to the pass."""
        attributes = {**_messaging(run.queue, "send", t.PUBLISH), **_run(run)}
        return self.span(
            f"{t.PUBLISH} {run.task}",
            SpanKind.PRODUCER,
            attributes,
            parent=run.trace,
            links=(pass_span.trace,),
        )

    def attempt(self, run: Run, message_id: str | None, wakeup_trace: str | None) -> Span:
        """The consumer span of an attempt: a child of (and linked to) the run's trigger;
        linked also to the wakeup's context when a republish sent it."""
        if not self.tracing:
            return NO_SPAN
        attributes = {**_messaging(run.queue, "process", t.ATTEMPT), **_run(run)}
        if message_id:
            attributes[t.MESSAGING_MESSAGE_ID] = message_id
        links = [run.trace]
        if wakeup_trace and wakeup_trace != run.trace:
            links.append(wakeup_trace)
        return self.span(
            f"{t.ATTEMPT} {run.task}",
            SpanKind.CONSUMER,
            attributes,
            parent=run.trace if self.attempts_as_children else _NEW_TRACE,
            links=links,
        )

    # metrics ---------------------------------------------------------------------

    def record(self, metric: Metric, value: float, attributes: Mapping[str, str]) -> None:
        for sink in self._sinks:
            sink.record(metric, value, attributes)

    def triggered(self, runs: Sequence[Run]) -> None:
        if not self.measuring:
            return
        for run in runs:
            if run.created:
                self.record(t.RUNS_TRIGGERED, 1, {t.TASK: run.task, t.QUEUE: run.queue})

    def attempt_started(self, run: Run, started: datetime, requested_at: datetime | None) -> None:
        if not self.measuring:
            return
        where = {t.TASK: run.task, t.QUEUE: run.queue}
        self.record(t.ATTEMPTS_STARTED, 1, where)
        if requested_at is not None:
            self.record(t.WAKEUP_LAG, max(0.0, (started - requested_at).total_seconds()), where)

    def attempt_ended(self, run: Run, stored: Run | None, seconds: float, span: Span) -> None:
        """An attempt's outcome (the stored run; ``None``: the lease was lost) on its span
        and in the metrics; a failure's redacted message and traceback on the span."""
        outcome = stored.status.value if stored is not None else LEASE_LOST_OUTCOME
        span.set({t.OUTCOME: outcome})
        failure = stored.failure if stored is not None else None
        if stored is None:
            span.fail("LeaseLost", "the lease was lost before the outcome was written")
        elif failure is not None and stored.status in _FAILED:
            span.fail(failure.type, failure.message, failure.traceback)
        if not self.measuring:
            return
        self.record(t.ATTEMPTS_ENDED, 1, {t.TASK: run.task, t.QUEUE: run.queue, t.OUTCOME: outcome})
        self.record(t.ATTEMPT_DURATION, seconds, {t.TASK: run.task, t.OUTCOME: outcome})

    def skipped(self, reason: str) -> None:
        self.record(t.WAKEUPS_SKIPPED, 1, {t.REASON: reason})

    def delayed(self, run: Run, reason: str) -> None:
        """``run`` waits for a limit instead of starting (``slot``: a concurrency one)."""
        self.record(t.RUNS_DELAYED, 1, {t.TASK: run.task, t.QUEUE: run.queue, t.REASON: reason})

    def maintained(
        self, span: Span, pass_id: str, counts: Mapping[str, int], seconds: float
    ) -> None:
        """A maintenance pass's figures, on its span and as metrics."""
        span.set({t.PASS_ID: pass_id, **{f"{t.ACTION}.{a}": n for a, n in counts.items()}})
        for action, count in counts.items():
            if count:
                self.record(t.MAINTENANCE_RUNS, count, {t.ACTION: action})
        self.record(t.MAINTENANCE_DURATION, seconds, {})

    def flush(self) -> None:
        """Export buffered spans and metrics (a Lambda invocation's end, a worker's stop)."""
        tracer = self.tracer
        if tracer is not None and tracer.enabled():
            tracer.flush()
        for sink in self._sinks:
            if sink.enabled():
                sink.flush()


_FAILED = frozenset({RunStatus.FAILED, RunStatus.RETRYING})
"""The statuses an attempt that failed leaves its run in."""
_NEW_TRACE = ""
"""A ``parent`` that is no context: the span starts a trace of its own."""


def _messaging(queue: str, operation_type: str, operation: str) -> dict[str, str | int]:
    return {
        t.MESSAGING_SYSTEM: t.MESSAGING_SQS,
        t.MESSAGING_DESTINATION: queue,
        t.MESSAGING_OPERATION_TYPE: operation_type,
        t.MESSAGING_OPERATION_NAME: operation,
    }


def _run(run: Run) -> dict[str, str | int]:
    return {
        t.RUN_ID: run.id,
        t.TASK: run.task,
        t.QUEUE: run.queue,
        t.ATTEMPT_NUMBER: run.attempt,
        **t.tag_attributes(run.tags),
    }
