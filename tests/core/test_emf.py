"""CloudWatch Embedded Metric Format lines: one valid EMF document per dimension
combination, whatever the attribute values, and nothing lost or raised."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runlane_sqs.adapters import emf
from runlane_sqs.adapters.emf import EmfMetrics, cloudwatch_unit, dimension_name
from runlane_sqs.core import telemetry as t
from runlane_sqs.core.errors import ConfigurationError

NOW = 1_900_000_000.25
CW_UNITS = {"Seconds", "Milliseconds", "Microseconds", "Bytes", "Count", "None"}


def make(stream: io.StringIO | io.TextIOWrapper, **kwargs: Any) -> EmfMetrics:
    return EmfMetrics(environment="prod", stream=stream, clock=lambda: NOW, **kwargs)


def strict_json(line: str) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    document = json.loads(line, parse_constant=refuse)
    assert isinstance(document, dict)
    return document


def documents(text: str) -> list[dict[str, Any]]:
    """Every line of the output, each checked to be one EMF document."""
    assert text == "" or text.endswith("\n")
    found = []
    for line in text.splitlines():
        assert line.isascii() and line.isprintable()
        document = strict_json(line)
        assert_emf(document)
        found.append(document)
    return found


def assert_emf(document: dict[str, Any]) -> None:
    meta = document["_aws"]
    assert meta["Timestamp"] == 1_900_000_000_250
    [directive] = meta["CloudWatchMetrics"]
    assert directive["Namespace"] == "runlane"
    [dimension_set] = directive["Dimensions"]
    assert "Environment" in dimension_set and document["Environment"] == "prod"
    assert len(dimension_set) <= emf.MAX_DIMENSIONS
    for name in dimension_set:
        value = document[name]
        assert isinstance(value, str) and value.strip()
        assert value.isascii() and value.isprintable()
        assert len(value) <= emf.MAX_DIMENSION_VALUE_CHARS
    assert 0 < len(directive["Metrics"]) <= emf.MAX_METRICS_PER_DOCUMENT
    for definition in directive["Metrics"]:
        assert definition["Unit"] in CW_UNITS
        value = document[definition["Name"]]
        if isinstance(value, list):
            assert 0 < len(value) <= emf.MAX_VALUES_PER_METRIC
            assert all(isinstance(v, int | float) for v in value)
        else:
            assert isinstance(value, int | float)


def where(task: str = "send_email", queue: str = "default") -> dict[str, str]:
    return {t.TASK: task, t.QUEUE: queue}


def test_one_line_per_dimension_combination() -> None:
    out = io.StringIO()
    sink = make(out)
    sink.record(t.RUNS_TRIGGERED, 1, where("a"))
    sink.record(t.ATTEMPTS_STARTED, 1, where("a"))
    sink.record(t.RUNS_TRIGGERED, 1, where("b"))
    sink.record(t.WAKEUPS_SKIPPED, 1, {t.REASON: "duplicate"})
    sink.flush()
    found = documents(out.getvalue())
    assert len(found) == 3
    by_task = {d.get("Task"): d for d in found}
    assert by_task["a"]["runlane.runs.triggered"] == 1
    assert by_task["a"]["runlane.attempts.started"] == 1
    assert by_task["b"]["Queue"] == "default"
    assert by_task[None]["Reason"] == "duplicate"
    assert by_task[None]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["Environment", "Reason"]
    ]


def test_every_catalogue_metric_makes_a_well_formed_document() -> None:
    out = io.StringIO()
    sink = make(out)
    attributes = {t.TASK: "x", t.QUEUE: "q", t.OUTCOME: "ok", t.REASON: "r", t.ACTION: "a"}
    for metric in t.METRICS:
        sink.record(metric, 2.5, {k: attributes[k] for k in metric.attributes})
    sink.flush()
    found = documents(out.getvalue())
    named = {m["Name"] for d in found for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert named == {metric.name for metric in t.METRICS}
    maintenance = next(d for d in found if "runlane.maintenance.duration" in d)
    assert maintenance["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Environment"]]


def test_counters_are_summed() -> None:
    out = io.StringIO()
    sink = make(out)
    for value in (1, 1, 2, 0.5):
        sink.record(t.ATTEMPTS_STARTED, value, where())
    sink.flush()
    [document] = documents(out.getvalue())
    assert document["runlane.attempts.started"] == 4.5


def test_histogram_values_are_kept_in_order() -> None:
    out = io.StringIO()
    sink = make(out)
    for value in (0.5, 3.0, 0.5, 120.0):
        sink.record(t.WAKEUP_LAG, value, where())
    sink.flush()
    [document] = documents(out.getvalue())
    assert document["runlane.wakeup.lag"] == [0.5, 3.0, 0.5, 120.0]


def test_more_than_100_values_spread_over_documents_and_none_lost() -> None:
    out = io.StringIO()
    sink = make(out)
    for i in range(250):
        sink.record(t.WAKEUP_LAG, float(i), where())
    sink.record(t.ATTEMPTS_STARTED, 7, where())
    sink.flush()
    found = documents(out.getvalue())
    assert [len(d["runlane.wakeup.lag"]) for d in found] == [100, 100, 50]
    assert [v for d in found for v in d["runlane.wakeup.lag"]] == [float(i) for i in range(250)]
    assert [d.get("runlane.attempts.started") for d in found] == [7, None, None]
    assert {d["Task"] for d in found} == {"send_email"}


def test_more_than_100_metrics_spread_over_documents() -> None:
    out = io.StringIO()
    sink = make(out)
    for i in range(150):
        metric = t.Metric(f"custom.m{i}", t.MetricKind.COUNTER, "{item}", "", (t.TASK,))
        sink.record(metric, i, {t.TASK: "x"})
    sink.flush()
    found = documents(out.getvalue())
    assert [len(d["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for d in found] == [100, 50]
    values = {key: v for d in found for key, v in d.items() if key.startswith("custom.")}
    assert values == {f"custom.m{i}": i for i in range(150)}


@pytest.mark.parametrize(
    ("ucum", "expected"),
    [
        ("s", "Seconds"),
        ("ms", "Milliseconds"),
        ("{run}", "Count"),
        ("{attempt}", "Count"),
        ("By", "Bytes"),
        ("1", "None"),
        ("", "None"),
        ("{unclosed", "None"),
    ],
)
def test_units_are_mapped(ucum: str, expected: str) -> None:
    assert cloudwatch_unit(ucum) == expected


def test_documents_carry_cloudwatch_units() -> None:
    out = io.StringIO()
    sink = make(out)
    sink.record(t.ATTEMPT_DURATION, 1.5, {t.TASK: "x", t.OUTCOME: "succeeded"})
    sink.record(t.ATTEMPTS_ENDED, 1, {t.TASK: "x", t.QUEUE: "q", t.OUTCOME: "failed"})
    sink.flush()
    units = {
        m["Name"]: m["Unit"]
        for d in documents(out.getvalue())
        for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }
    assert units == {"runlane.attempt.duration": "Seconds", "runlane.attempts.ended": "Count"}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (t.TASK, "Task"),
        (t.OUTCOME, "Outcome"),
        (t.ENVIRONMENT, "Environment"),
        (t.PASS_ID, "MaintenancePassId"),
        (t.MESSAGING_DESTINATION, "MessagingDestinationName"),
        ("", "Attribute"),
    ],
)
def test_dimension_names_follow_the_rule(key: str, expected: str) -> None:
    assert dimension_name(key) == expected


def test_catalogue_keys_get_distinct_dimension_names() -> None:
    keys = {key for metric in t.METRICS for key in metric.attributes} | {t.ENVIRONMENT}
    assert len({dimension_name(key) for key in keys}) == len(keys)


def test_the_sinks_environment_wins_and_dimensions_are_capped() -> None:
    out = io.StringIO()
    sink = make(out)
    attributes = {t.ENVIRONMENT: "staging"} | {f"k{i:02}": "v" for i in range(40)}
    sink.record(t.RUNS_TRIGGERED, 1, attributes)
    sink.flush()
    [document] = documents(out.getvalue())
    assert document["Environment"] == "prod"
    assert len(document["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == 30


HOSTILE = {
    "control": "\x00\x07\x1b[31mred\x7f",
    "newline": "line one\nline two\r\n",
    "lone surrogate": "bad\ud800pair\udfff",
    "long": "x" * 5000,
    "empty": "",
    "blank": "   ",
    "markup": '</script><img src=x onerror="alert(1)">{"_aws":1}',
    "unicode": "tâche 名前 🚀",
}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_values_make_one_valid_line(value: str) -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")  # strict: refuses surrogates
    sink = make(out)
    sink.record(t.ATTEMPTS_ENDED, 1, {t.TASK: value, t.QUEUE: "q", t.OUTCOME: value})
    sink.record(t.ATTEMPT_DURATION, 0.25, {t.TASK: value, t.OUTCOME: value})
    sink.flush()
    text = raw.getvalue().decode("ascii")
    assert text.count("\n") == 2
    found = documents(text)
    for document in found:
        assert document["Task"] == document["Outcome"]
        expected = min(len(value), emf.MAX_DIMENSION_VALUE_CHARS) if value.strip() else 1
        assert len(document["Task"]) == expected


def test_hostile_values_are_replaced_truncated_or_placeholders() -> None:
    out = io.StringIO()
    sink = make(out)
    for value in ("a\nb", "\ud800", "y" * 5000, "", "   ", '<b>"q"</b>'):
        sink.record(t.WAKEUPS_SKIPPED, 1, {t.REASON: value})
    sink.flush()
    reasons = {d["Reason"] for d in documents(out.getvalue())}
    assert reasons == {"a?b", "?", "y" * 1024, emf.PLACEHOLDER, '<b>"q"</b>'}


def test_values_json_cannot_carry_are_not_recorded() -> None:
    out = io.StringIO()
    sink = make(out)
    for value in (float("nan"), float("inf"), 1.0, float("-inf")):
        sink.record(t.WAKEUP_LAG, value, where())
        sink.record(t.ATTEMPTS_STARTED, value, where())
    sink.flush()
    [document] = documents(out.getvalue())
    assert document["runlane.wakeup.lag"] == [1.0]
    assert document["runlane.attempts.started"] == 1.0


def test_flush_empties_the_buffer() -> None:
    out = io.StringIO()
    sink = make(out)
    sink.record(t.RUNS_TRIGGERED, 1, where())
    sink.flush()
    assert len(documents(out.getvalue())) == 1
    sink.flush()
    assert len(documents(out.getvalue())) == 1
    sink.record(t.RUNS_TRIGGERED, 1, where())
    sink.flush()
    assert [d["runlane.runs.triggered"] for d in documents(out.getvalue())] == [1, 1]


def test_an_empty_flush_writes_nothing() -> None:
    out = io.StringIO()
    make(out).flush()
    assert out.getvalue() == ""


def test_standard_output_is_looked_up_at_flush(capsys: pytest.CaptureFixture[str]) -> None:
    sink = EmfMetrics(environment="prod", clock=lambda: NOW)
    sink.record(t.RUNS_TRIGGERED, 1, where())
    sink.flush()
    [document] = documents(capsys.readouterr().out)
    assert document["runlane.runs.triggered"] == 1


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch as often as they can, so that a missing lock shows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("busy_switching")
def test_eight_threads_lose_no_counts() -> None:
    out = io.StringIO()
    sink = make(out)
    start = threading.Barrier(8)

    def work(n: int) -> None:
        start.wait()
        for i in range(2000):
            sink.record(t.ATTEMPTS_STARTED, 1, where(f"task{i % 3}"))
            sink.record(t.WAKEUP_LAG, float(n), where(f"task{i % 3}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.flush()
    found = documents(out.getvalue())
    assert sum(d.get("runlane.attempts.started", 0) for d in found) == 16_000
    assert sum(len(d.get("runlane.wakeup.lag", [])) for d in found) == 16_000


def test_too_many_groups_are_written_out_early() -> None:
    out = io.StringIO()
    sink = make(out)
    for i in range(emf.MAX_GROUPS - 1):
        sink.record(t.RUNS_TRIGGERED, 1, where(f"task{i}"))
    assert out.getvalue() == ""
    sink.record(t.RUNS_TRIGGERED, 1, where("last"))
    assert len(documents(out.getvalue())) == emf.MAX_GROUPS
    sink.record(t.RUNS_TRIGGERED, 1, where("after"))
    sink.flush()
    found = documents(out.getvalue())
    assert len(found) == emf.MAX_GROUPS + 1
    assert sum(d["runlane.runs.triggered"] for d in found) == emf.MAX_GROUPS + 1


def test_too_many_values_are_written_out_early() -> None:
    out = io.StringIO()
    sink = make(out)
    for i in range(emf.MAX_BUFFERED_VALUES - 1):
        sink.record(t.WAKEUP_LAG, float(i), where())
    assert out.getvalue() == ""
    sink.record(t.WAKEUP_LAG, -1.0, where())
    found = documents(out.getvalue())
    assert sum(len(d["runlane.wakeup.lag"]) for d in found) == emf.MAX_BUFFERED_VALUES


def test_a_closed_stream_warns_once_and_does_not_raise(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    sink = make(out)
    out.close()
    with caplog.at_level(logging.WARNING, logger="runlane_sqs"):
        for _ in range(3):
            sink.record(t.RUNS_TRIGGERED, 1, where())
            sink.flush()
    warnings = [r for r in caplog.records if r.name == "runlane_sqs"]
    assert len(warnings) == 1
    assert "EMF" in warnings[0].getMessage()


@pytest.mark.parametrize("namespace", ["", "has space", "x" * 256, "ünï"])
def test_an_invalid_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(ConfigurationError):
        EmfMetrics(namespace=namespace, environment="prod")


def test_a_value_waits_at_most_the_flush_interval_given_more_records() -> None:
    out = io.StringIO()
    now = [NOW]
    sink = EmfMetrics(environment="prod", stream=out, clock=lambda: now[0], flush_interval=60)
    sink.record(t.RUNS_TRIGGERED, 1, where())
    now[0] += 59.9
    sink.record(t.RUNS_TRIGGERED, 1, where())
    assert out.getvalue() == ""
    now[0] += 0.1
    sink.record(t.RUNS_TRIGGERED, 1, where())
    (line,) = out.getvalue().splitlines()
    assert strict_json(line)["runlane.runs.triggered"] == 3
    now[0] += 30  # a new buffer: its interval starts at its first value
    sink.record(t.RUNS_TRIGGERED, 1, where())
    assert len(out.getvalue().splitlines()) == 1
