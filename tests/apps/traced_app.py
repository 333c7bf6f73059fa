"""Worker app whose spans and metrics go to files, through OpenTelemetry's SDK:
``--app tests.apps.traced_app:app`` with ``RUNLANE_TEST_SPANS_DIR`` set. Spans are
exported as each ends (one JSON line in ``spans-{pid}.jsonl``); metrics when the worker
flushes at its stop (``metrics-{pid}.jsonl``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from runlane_sqs import Runlane, Telemetry
from tests.apps.traced_tasks import SPANS_DIR_ENV, register_traced

DIRECTORY = Path(os.environ[SPANS_DIR_ENV])
HOUR_MS = 3_600_000


class FileSpanExporter(SpanExporter):
    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS


tracer_provider = TracerProvider()
tracer_provider.add_span_processor(
    SimpleSpanProcessor(FileSpanExporter(DIRECTORY / f"spans-{os.getpid()}.jsonl"))
)
metrics_file = (DIRECTORY / f"metrics-{os.getpid()}.jsonl").open("a")
exporter = ConsoleMetricExporter(
    out=metrics_file, formatter=lambda data: data.to_json(indent=None) + "\n"
)
meter_provider = MeterProvider(
    metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=HOUR_MS)]
)
telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
app = register_traced(Runlane.from_env(telemetry=telemetry))
