"""OpenTelemetry's SDK with in-memory exporters, for tests that read what runlane-sqs
traced and measured (tests/behaviour/test_tracing.py, tests/behaviour/test_metrics.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runlane_sqs import Telemetry


@dataclass
class Recorded:
    """What one test's app traced and measured."""

    tracer_provider: TracerProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    meter_provider: MeterProvider

    def telemetry(self, **options: Any) -> Telemetry:
        """Telemetry to these providers (apps given it share them)."""
        return Telemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Ended spans (named ``name``), in the order they ended."""
        ended = list(self.exporter.get_finished_spans())
        return [s for s in ended if name is None or s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` of each data point of ``metric`` collected now."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        found.extend((dict(p.attributes or {}), p) for p in item.data.data_points)
        return found

    def counts(self, metric: str, by: str) -> dict[str, int]:
        """A counter's totals by the value of attribute ``by``."""
        return {str(attrs[by]): int(point.value) for attrs, point in self.points(metric)}


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    yield Recorded(provider, exporter, reader, meters)
    provider.shutdown()
    meters.shutdown()
