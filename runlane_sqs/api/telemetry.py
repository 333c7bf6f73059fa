"""What an app traces and measures, and where it goes (docs/observability.md).

``Runlane(..., telemetry=Telemetry(...))``; by default :meth:`Telemetry.from_env`:
tracing and metrics through OpenTelemetry's API when it is installed (the ``otel``
extra), CloudWatch Embedded Metric Format lines with ``RUNLANE_METRICS=emf``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.engine.observing import Observer
from runlane_sqs.ports.telemetry import MetricSink, Tracer

ENV_TRACING = "RUNLANE_TRACING"
ENV_METRICS = "RUNLANE_METRICS"
ENV_EMF_NAMESPACE = "RUNLANE_EMF_NAMESPACE"
MetricsOutput = Literal["otel", "emf", "none"]
METRICS_OUTPUTS: tuple[MetricsOutput, ...] = ("otel", "emf", "none")


def otel_installed() -> bool:
    """Is OpenTelemetry's API importable (the ``otel`` extra)?"""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no opentelemetry package at all
        return False


@dataclass(frozen=True)
class Telemetry:
    """Tracing and metrics of one app.

    ``tracing``: spans through OpenTelemetry's global tracer provider (they record once
    the application configures OpenTelemetry's SDK). ``metrics``: each output is
    ``"otel"`` (the global meter provider), ``"emf"`` (CloudWatch Embedded Metric Format
    on stdout, no dependency) or ``"none"``. ``attempts_as_children``: each attempt's
    span is a child of its run's trigger span (one trace per run); ``False`` starts a
    trace per attempt, linked to the trigger's. ``emf_namespace``: the CloudWatch
    namespace of EMF metrics. ``tracer_provider``/``meter_provider``: OpenTelemetry
    providers to use instead of the global ones.
    """

    tracing: bool = True
    metrics: Sequence[MetricsOutput] = ("otel",)
    attempts_as_children: bool = True
    emf_namespace: str = "runlane"
    tracer_provider: Any = field(default=None, compare=False, repr=False)
    meter_provider: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for output in self.metrics:
            if output not in METRICS_OUTPUTS:
                raise ConfigurationError(
                    f"metrics output {output!r} is not one of {', '.join(METRICS_OUTPUTS)}"
                )
        if (self.tracing or "otel" in self.metrics) and not otel_installed():
            raise ConfigurationError(
                "tracing and OpenTelemetry metrics need opentelemetry-api: "
                "pip install 'runlane-sqs[otel]' (or Telemetry(tracing=False, metrics=()))"
            )

    @classmethod
    def off(cls) -> Telemetry:
        """No spans, no metrics."""
        return cls(tracing=False, metrics=())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Telemetry:
        """The default: OpenTelemetry tracing and metrics when its API is installed, else
        none; ``RUNLANE_TRACING=off`` turns tracing off, ``RUNLANE_METRICS`` names the
        metric outputs (comma-separated: ``otel``, ``emf``, ``none``) and
        ``RUNLANE_EMF_NAMESPACE`` the EMF namespace."""
        env = os.environ if environ is None else environ
        installed = otel_installed()
        tracing_text = env.get(ENV_TRACING, "").strip().lower()
        if tracing_text not in ("", "on", "off"):
            raise ConfigurationError(f"{ENV_TRACING}={tracing_text!r}: use on or off")
        tracing = installed if tracing_text == "" else tracing_text == "on"
        metrics_text = env.get(ENV_METRICS, "").strip().lower()
        if metrics_text:
            outputs = [part.strip() for part in metrics_text.split(",") if part.strip()]
            for output in outputs:
                if output not in METRICS_OUTPUTS:
                    raise ConfigurationError(
                        f"{ENV_METRICS}={metrics_text!r}: each output is one of "
                        f"{', '.join(METRICS_OUTPUTS)}"
                    )
            chosen = [cast(MetricsOutput, o) for o in outputs if o != "none"]
            metrics: tuple[MetricsOutput, ...] = tuple(chosen)
        else:
            metrics = ("otel",) if installed else ()
        namespace = env.get(ENV_EMF_NAMESPACE, "").strip() or "runlane"
        return cls(tracing=tracing, metrics=metrics, emf_namespace=namespace)

    def observer(self, config: RunlaneConfig) -> Observer:
        """The engine's observer for an app of ``config``."""
        tracer: Tracer | None = None
        sinks: list[MetricSink] = []
        if self.tracing:
            from runlane_sqs.adapters.otel import OtelTracer  # noqa: PLC0415 (optional extra)

            tracer = OtelTracer(self.tracer_provider)
        if "otel" in self.metrics:
            from runlane_sqs.adapters.otel import OtelMetrics  # noqa: PLC0415 (optional extra)

            sinks.append(OtelMetrics(self.meter_provider))
        if "emf" in self.metrics:
            from runlane_sqs.adapters.emf import EmfMetrics  # noqa: PLC0415 (not always used)

            sinks.append(EmfMetrics(namespace=self.emf_namespace, environment=config.environment))
        return Observer(
            tracer=tracer,
            metrics=sinks,
            attempts_as_children=self.attempts_as_children,
            redact=config.redact,
        )
