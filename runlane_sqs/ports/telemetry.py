"""What the engine needs from a tracing and a metrics backend (docs/observability.md).

The engine names spans and metrics (:mod:`runlane_sqs.core.telemetry`); a
:class:`Tracer` makes spans and carries their context, a :class:`MetricSink` records
measurements. The adapters are OpenTelemetry's API (:mod:`runlane_sqs.adapters.otel`)
and CloudWatch's Embedded Metric Format (:mod:`runlane_sqs.adapters.emf`); without
either, nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from runlane_sqs.core.telemetry import Metric, SpanKind

Attributes = Mapping[str, str | int | float | bool]


class Span(Protocol):
    """A started span: ended exactly once."""

    @property
    def trace(self) -> str | None:
        """The span's context, packed (what a run it triggers stores)."""

    @property
    def trace_id(self) -> str | None:
        """The span's trace id (32 hex digits) while it records, for log lines."""

    def set(self, attributes: Attributes) -> None: ...

    def fail(self, kind: str, message: str, stacktrace: str | None = None) -> None:
        """Mark the span as failed, recording the (redacted) exception as an event."""

    def active(self) -> AbstractContextManager[None]:
        """Make the span the current one (what a handler's own spans and logs nest in)."""

    def end(self) -> None: ...


class Tracer(Protocol):
    def enabled(self) -> object:
        """Whether spans would record now (falsy: the engine starts none). Called before
        every span, on every run: it must cost next to nothing."""

    def start(
        self,
        name: str,
        kind: SpanKind,
        attributes: Attributes,
        *,
        parent: str | None = None,
        links: Sequence[str] = (),
    ) -> Span:
        """Start a span linked to each packed context in ``links``: a child of the packed
        context ``parent``, of the current span when ``parent`` is ``None``, the root of
        a new trace when it is ``""`` (or not a valid context)."""

    def flush(self) -> None:
        """Export the ended spans the backend buffers."""


class MetricSink(Protocol):
    def enabled(self) -> object:
        """Whether a measurement would be recorded now (falsy: the engine makes none).
        Called before every measurement: it must cost next to nothing."""

    def record(self, metric: Metric, value: float, attributes: Mapping[str, str]) -> None:
        """Add ``value`` to a counter, or record it in a histogram."""

    def flush(self) -> None:
        """Write out what is buffered (a Lambda invocation's end, a worker's stop)."""
