"""Tracing and metrics through OpenTelemetry's API (the ``otel`` extra).

Spans and instruments come from the global tracer and meter providers (or the ones
given), so they record only once the application configures OpenTelemetry's SDK (or an
agent does). Until a global provider is set, runlane-sqs starts no span and records no
metric at all: it does not even make the API's no-op calls (docs/observability.md,
"Overhead"). Trace context travels as W3C ``traceparent`` and
``tracestate`` (:mod:`runlane_sqs.core.telemetry`), whatever propagators the
application configures for its own requests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import cached_property, partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.metrics import _internal as _metrics_state
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runlane_sqs.core.telemetry import Metric, MetricKind, SpanKind, pack_trace, unpack_trace
from runlane_sqs.ports.telemetry import Attributes

INSTRUMENTATION = "runlane_sqs"
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Histogram bucket boundaries for the metrics measured in seconds."""
FLUSH_TIMEOUT_MS = 5000
_W3C = TraceContextTextMapPropagator()
_KINDS = {
    SpanKind.INTERNAL: otel_trace.SpanKind.INTERNAL,
    SpanKind.PRODUCER: otel_trace.SpanKind.PRODUCER,
    SpanKind.CONSUMER: otel_trace.SpanKind.CONSUMER,
}


def _version() -> str:
    try:
        return version("runlane-sqs")
    except PackageNotFoundError:  # pragma: no cover (a source checkout without metadata)
        return "0"


def _context(packed: str) -> otel_trace.SpanContext:
    """The span context a packed trace context names (invalid when it names none)."""
    return otel_trace.get_current_span(_W3C.extract(unpack_trace(packed))).get_span_context()


class OtelSpan:
    """A span of OpenTelemetry's API."""

    def __init__(self, span: otel_trace.Span) -> None:
        self._span = span

    @cached_property
    def trace(self) -> str | None:
        """Packed once, on first use (most spans never trigger a run)."""
        carrier: dict[str, str] = {}
        if self._span.get_span_context().is_valid:
            _W3C.inject(carrier, otel_trace.set_span_in_context(self._span))
        return pack_trace(carrier.get("traceparent"), carrier.get("tracestate"))

    @property
    def trace_id(self) -> str | None:
        context = self._span.get_span_context()
        return otel_trace.format_trace_id(context.trace_id) if context.is_valid else None

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def fail(self, kind: str, message: str, stacktrace: str | None = None) -> None:
        event: dict[str, str] = {"exception.type": kind, "exception.message": message}
        if stacktrace:
            event["exception.stacktrace"] = stacktrace
        self._span.add_event("exception", event)
        self._span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"[:500]))

    def active(self) -> AbstractContextManager[Any]:
        return otel_trace.use_span(
            self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def end(self) -> None:
        self._span.end()


class OtelTracer:
    """Starts spans on the ``runlane_sqs`` tracer of ``provider`` (default: the global
    tracer provider, looked up as OpenTelemetry's API does, so one set later counts)."""

    def __init__(self, provider: otel_trace.TracerProvider | None = None) -> None:
        self._provider = provider
        self._tracer = otel_trace.get_tracer(INSTRUMENTATION, _version(), provider)
        self.enabled = _provider_check(
            provider, otel_trace, "_TRACER_PROVIDER", otel_trace.get_tracer_provider
        )

    def start(
        self,
        name: str,
        kind: SpanKind,
        attributes: Attributes,
        *,
        parent: str | None = None,
        links: Sequence[str] = (),
    ) -> OtelSpan:
        context = None if parent is None else _W3C.extract(unpack_trace(parent))
        linked = [Link(c) for c in map(_context, links) if c.is_valid]
        span = self._tracer.start_span(
            name, context, _KINDS[kind], attributes=attributes, links=linked
        )
        return OtelSpan(span)

    def flush(self) -> None:
        _force_flush(self._provider or otel_trace.get_tracer_provider())


class OtelMetrics:
    """Records on the ``runlane_sqs`` meter of ``provider`` (default: the global meter
    provider)."""

    def __init__(self, provider: otel_metrics.MeterProvider | None = None) -> None:
        self._provider = provider
        self._meter = otel_metrics.get_meter(INSTRUMENTATION, _version(), provider)
        self._instruments: dict[str, Any] = {}
        self.enabled = _provider_check(provider, _metrics_state, "_METER_PROVIDER", _meter_provider)

    def record(self, metric: Metric, value: float, attributes: Mapping[str, str]) -> None:
        if not self.enabled():
            return
        instrument = self._instruments.get(metric.name)
        if instrument is None:
            instrument = self._instruments[metric.name] = self._create(metric)
        if metric.kind is MetricKind.COUNTER:
            instrument.add(value, attributes)
        else:
            instrument.record(value, attributes)

    def _create(self, metric: Metric) -> Any:
        if metric.kind is MetricKind.COUNTER:
            return self._meter.create_counter(metric.name, metric.unit, metric.description)
        buckets = SECONDS_BUCKETS if metric.unit == "s" else None
        return self._meter.create_histogram(
            metric.name,
            metric.unit,
            metric.description,
            explicit_bucket_boundaries_advisory=buckets,
        )

    def flush(self) -> None:
        _force_flush(self._provider or otel_metrics.get_meter_provider())


def _meter_provider() -> object:
    return otel_metrics.get_meter_provider()


def _provider_check(
    given: object | None, module: object, variable: str, public: Callable[[], object]
) -> Callable[[], object]:
    """The adapter's ``enabled``: truthy once a provider is ``given`` or set globally.

    The engine asks before every span and measurement, on every run of an app that may
    never configure OpenTelemetry, so the check reads the API's own variable (set once,
    never unset) and runs no code of ours: asking the public getter costs an environment
    look-up per call. Without that variable (another API version), the getter's stand-in
    says."""
    if given is not None:
        return lambda: True
    if hasattr(module, variable):
        return partial(getattr, module, variable)
    return lambda: type(public()).__name__ not in ("ProxyTracerProvider", "_ProxyMeterProvider")


def _force_flush(provider: object) -> None:
    """Export what the SDK buffers (the API's no-op providers have nothing to flush)."""
    flush = getattr(provider, "force_flush", None)
    if callable(flush):
        flush(FLUSH_TIMEOUT_MS)
