"""OpenTelemetry's global providers, in a fresh interpreter each (they are set once per
process): an app whose process configures no SDK starts no span and stores no trace
context; once the application sets the global providers, even after the app was built,
runs are traced and measured."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.emulators import REPO_ROOT

SCRIPT = textwrap.dedent(
    """
    import json
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from runlane_sqs.testing import in_memory_app

    app = in_memory_app()
    app.task(lambda ctx, payload: ctx.trace_id, name="work")
    before = app.trigger("work")
    app.worker().drain()

    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    after = app.trigger("work")
    app.worker().drain()
    names = [
        m.name
        for r in reader.get_metrics_data().resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
    ]
    print(json.dumps({
        "before": [before.trace, app.runs.get(before.id).result],
        "after": [after.trace, app.runs.get(after.id).result],
        "spans": sorted(s.name for s in exporter.get_finished_spans()),
        "metrics": sorted(names),
    }))
    """
)


def test_nothing_is_traced_until_the_application_sets_the_global_providers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["before"] == [None, None]
    trace_context, trace_id = seen["after"]
    assert trace_context.startswith(f"00-{trace_id}-")
    assert seen["spans"] == ["attempt work", "trigger work"]
    assert {"runlane.runs.triggered", "runlane.attempts.ended"} <= set(seen["metrics"])
