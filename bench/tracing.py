"""The ``tracing`` scenario: what traces and metrics cost per run.

The same runs (a no-op task: a trigger, then a sync worker's attempt) on the in-memory
backend, so the figure is the library's own CPU time with no emulator in it, in four
modes: telemetry off; OpenTelemetry's API without an SDK (the default when the ``otel``
extra is installed and the application configures nothing); the SDK recording every
span (batched to an exporter that drops them) and every metric; and CloudWatch EMF
metrics only. Each mode runs ``ROUNDS`` times, in turns; the fastest round counts (the
others carry the machine's noise, a few percent here).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runlane_sqs import Runlane, TaskContext, Telemetry
from runlane_sqs.testing import in_memory_app

TASK = "bench.traced_noop"
ROUNDS = 5
MODES = ("off", "api-only", "sdk", "emf")


@dataclass
class TracingResult:
    mode: str
    runs: int
    us_per_run: float
    """Process CPU time per run (trigger and attempt), fastest round."""
    overhead_us: float | None = None
    """CPU time per run more than with telemetry off."""
    spans_per_run: float | None = None
    status: str = "ok"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Dropped:
    """A span exporter that keeps nothing (the SDK still builds and batches each span)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _Discard:
    """A text stream for EMF lines that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _telemetry(mode: str) -> tuple[Telemetry, Callable[[], int]]:
    """The mode's telemetry, and how many spans it exported so far."""
    if mode == "off":
        return Telemetry.off(), lambda: 0
    if mode == "api-only":
        return Telemetry(), lambda: 0
    if mode == "emf":
        return Telemetry(tracing=False, metrics=("emf",)), lambda: 0
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    exporter = _Dropped()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))  # type: ignore[arg-type]
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = Telemetry(tracer_provider=provider, meter_provider=meters)

    def exported() -> int:
        provider.force_flush()
        return exporter.spans

    return telemetry, exported


def _app(telemetry: Telemetry) -> Runlane:
    app = in_memory_app(telemetry=telemetry)

    @app.task(name=TASK)
    def noop(ctx: TaskContext, payload: Any) -> None:
        return None

    return app


def _round(mode: str, runs: int) -> tuple[float, float]:
    """CPU seconds for ``runs`` runs, and spans exported per run."""
    telemetry, exported = _telemetry(mode)
    app = _app(telemetry)
    worker = app.worker(concurrency=1)
    with contextlib.redirect_stdout(_Discard()):  # EMF lines, written as a worker stops
        started = time.process_time()
        for _ in range(runs):
            app.trigger(TASK)
        executed = worker.drain()
        seconds = time.process_time() - started
    if executed != runs:
        raise RuntimeError(f"{mode}: {executed} of {runs} runs executed")
    return seconds, exported() / runs


def measure_tracing(runs: int, progress: Callable[[int], None]) -> list[TracingResult]:
    """Each mode ``ROUNDS`` times, the modes taking turns (so a slow spell of the
    machine falls on all of them), garbage collected before each round."""
    best: dict[str, tuple[float, float]] = {}
    for done in range(ROUNDS * len(MODES)):
        mode = MODES[done % len(MODES)]
        gc.collect()
        measured = _round(mode, runs)
        if mode not in best or measured[0] < best[mode][0]:
            best[mode] = measured
        progress(done + 1)
    rows = [
        TracingResult(mode, runs, best[mode][0] / runs * 1e6, spans_per_run=best[mode][1])
        for mode in MODES
    ]
    off = rows[0].us_per_run
    for row in rows:
        row.overhead_us = row.us_per_run - off
    return rows
