"""The stored form of a run's trace context, whatever text arrives in a wakeup, and the
telemetry settings an app reads from its environment."""

from __future__ import annotations

import pytest

from runlane_sqs import ConfigurationError, Telemetry
from runlane_sqs.core.telemetry import MAX_TRACE_CHARS, pack_trace, trace_id_of, unpack_trace

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_traceparent_and_tracestate_round_trip() -> None:
    packed = pack_trace(PARENT, "vendor=a1,other=b2")
    assert packed == f"{PARENT};vendor=a1,other=b2"
    assert unpack_trace(packed) == {"traceparent": PARENT, "tracestate": "vendor=a1,other=b2"}
    assert trace_id_of(packed) == TRACE_ID
    assert unpack_trace(pack_trace(PARENT)) == {"traceparent": PARENT}


def test_a_tracestate_that_would_not_fit_is_dropped_not_the_trace() -> None:
    long_state = "k=" + "v" * (MAX_TRACE_CHARS - 2)
    assert pack_trace(PARENT, long_state) == PARENT
    assert pack_trace(PARENT, "bad\nstate") == PARENT


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "<script>alert(1)</script>",
        PARENT.upper(),
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        PARENT + "\x00",
        PARENT[:-1] + "\u202e",
        "\ud800" + PARENT,
        PARENT + ";" + "x" * MAX_TRACE_CHARS,  # longer than a wakeup may carry
    ],
)
def test_malformed_or_hostile_contexts_are_ignored(text: str) -> None:
    assert unpack_trace(text) == {}
    assert trace_id_of(text) is None
    assert pack_trace(text) is None


def test_a_bad_tracestate_is_ignored_and_the_parent_kept() -> None:
    assert unpack_trace(PARENT + ";\x1b[31m") == {"traceparent": PARENT}


def test_the_environment_sets_tracing_and_metric_outputs() -> None:
    assert Telemetry.from_env({}) == Telemetry()  # the otel extra is installed here
    assert Telemetry.from_env({"RUNLANE_TRACING": "off"}).tracing is False
    chosen = Telemetry.from_env({"RUNLANE_METRICS": "emf, otel", "RUNLANE_EMF_NAMESPACE": "shop"})
    assert tuple(chosen.metrics) == ("emf", "otel")
    assert chosen.emf_namespace == "shop"
    assert tuple(Telemetry.from_env({"RUNLANE_METRICS": "none"}).metrics) == ()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("RUNLANE_TRACING", "maybe"), ("RUNLANE_METRICS", "statsd"), ("RUNLANE_METRICS", "emf,x")],
)
def test_bad_settings_are_refused_by_name(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Telemetry.from_env({variable: value})


def test_an_unknown_metrics_output_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'prometheus' is not one of"):
        Telemetry(metrics=("prometheus",))  # type: ignore[arg-type]
