"""Metrics as CloudWatch Embedded Metric Format (EMF) lines on standard output.

For Lambda users who run no collector: Lambda sends a function's standard output to
CloudWatch Logs, and CloudWatch extracts the metrics of every log line that is an EMF
document (a JSON object whose ``_aws.CloudWatchMetrics`` names its metrics and
dimensions); no agent or log-format header is needed there. :class:`EmfMetrics`
buffers what the engine records and writes, at each flush, one JSON line per
dimension combination: counters summed, histogram values as an array of values.

What CloudWatch would refuse is made valid at the edge (limits from the EMF
specification and the CloudWatch ``Dimension`` API):

- a dimension value keeps only printable ASCII (every other character becomes ``?``)
  and its first :data:`MAX_DIMENSION_VALUE_CHARS` characters; one that is empty or
  blank becomes :data:`PLACEHOLDER`;
- an attribute key becomes a dimension name by rule: ``runlane.`` dropped, the rest
  split at every character that is not an ASCII letter or digit, each part capitalised
  (``runlane.task`` is ``Task``, ``runlane.maintenance.pass_id`` is
  ``MaintenancePassId``); the sink's environment is the ``Environment`` dimension;
- a metric holding more than :data:`MAX_VALUES_PER_METRIC` values, or a group of more
  than :data:`MAX_METRICS_PER_DOCUMENT` metrics, is spread over more documents (as
  AWS's own EMF libraries do: every value is kept);
- at :data:`MAX_GROUPS` dimension combinations or :data:`MAX_BUFFERED_VALUES` values
  buffered, the call to ``record`` that reaches it writes the buffer out (an early
  flush: nothing is dropped, memory stays bounded); so does the first ``record`` once
  the oldest buffered value is ``flush_interval`` seconds old (a long-running worker's
  metrics reach CloudWatch every minute, not only at its stop);
- a value that is not finite (NaN, infinity) is not recorded: JSON cannot carry it.

A write that fails (a closed stream) is dropped, with one warning on the ``runlane_sqs``
logger: it never raises into the engine.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TextIO

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.telemetry import ENVIRONMENT, Metric, MetricKind

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "MAX_BUFFERED_VALUES",
    "MAX_DIMENSIONS",
    "MAX_DIMENSION_NAME_CHARS",
    "MAX_DIMENSION_VALUE_CHARS",
    "MAX_GROUPS",
    "MAX_METRICS_PER_DOCUMENT",
    "MAX_VALUES_PER_METRIC",
    "PLACEHOLDER",
    "EmfMetrics",
    "cloudwatch_unit",
    "dimension_name",
]

MAX_VALUES_PER_METRIC = 100
"""EMF: a metric's array of values has at most 100 members."""
MAX_METRICS_PER_DOCUMENT = 100
"""EMF: a MetricDirective names at most 100 metrics."""
MAX_DIMENSIONS = 30
"""EMF: a dimension set has at most 30 keys (the environment included)."""
MAX_DIMENSION_VALUE_CHARS = 1024
"""CloudWatch: a dimension value is 1 to 1024 printable ASCII characters."""
MAX_DIMENSION_NAME_CHARS = 255
"""CloudWatch: a dimension name is 1 to 255 ASCII characters."""
DEFAULT_FLUSH_INTERVAL = 60.0
"""Seconds a value waits in the buffer at most, given more values are recorded."""
MAX_GROUPS = 1000
"""Dimension combinations buffered before ``record`` writes the buffer out."""
MAX_BUFFERED_VALUES = 10_000
"""Histogram values buffered before ``record`` writes the buffer out."""
PLACEHOLDER = "-"
"""The dimension value written for an empty or blank one (CloudWatch refuses those)."""

_NAMESPACE = re.compile(r"[A-Za-z0-9._#:/-]{1,255}")
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")
_NOT_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]+")
_UNITS = {"s": "Seconds", "ms": "Milliseconds", "us": "Microseconds", "By": "Bytes"}
_logger = logging.getLogger("runlane_sqs")

_Dimensions = tuple[tuple[str, str], ...]


def cloudwatch_unit(ucum: str) -> str:
    """The CloudWatch unit of a UCUM unit: ``{run}`` and other annotations count."""
    if ucum.startswith("{") and ucum.endswith("}"):
        return "Count"
    return _UNITS.get(ucum, "None")


@lru_cache(maxsize=256)
def dimension_name(key: str) -> str:
    """The CloudWatch dimension name of an attribute key (``runlane.task``: ``Task``)."""
    parts = _NOT_ALPHANUMERIC.split(key.removeprefix("runlane."))
    name = "".join(part[:1].upper() + part[1:] for part in parts)
    return name[:MAX_DIMENSION_NAME_CHARS] or "Attribute"


def _dimension_value(raw: str) -> str:
    value = _NOT_PRINTABLE.sub("?", str(raw)[:MAX_DIMENSION_VALUE_CHARS])
    return value if value.strip() else PLACEHOLDER


@dataclass(slots=True)
class _Group:
    """What one dimension combination holds between flushes."""

    units: dict[str, str] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)


class EmfMetrics:
    """A :class:`~runlane_sqs.ports.telemetry.MetricSink` writing EMF lines."""

    def __init__(
        self,
        *,
        namespace: str = "runlane",
        environment: str,
        stream: TextIO | None = None,
        clock: Callable[[], float] | None = None,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
    ) -> None:
        if not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError(f"invalid CloudWatch namespace {namespace!r}")
        self.namespace = namespace
        self._environment = (dimension_name(ENVIRONMENT), _dimension_value(environment))
        self._stream = stream
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._groups: dict[_Dimensions, _Group] = {}
        self._buffered = 0
        self._known: dict[tuple[tuple[str, str], ...], _Dimensions] = {}
        self._warned = False
        self._interval = flush_interval
        self._opened = 0.0
        """When the oldest buffered value was recorded."""

    def enabled(self) -> bool:
        """EMF lines are written whatever else is configured."""
        return True

    def record(self, metric: Metric, value: float, attributes: Mapping[str, str]) -> None:
        if not math.isfinite(value):
            return
        key = self._dimensions(attributes)
        full: dict[_Dimensions, _Group] | None = None
        now = self._clock()
        with self._lock:
            if not self._groups:
                self._opened = now
            group = self._groups.setdefault(key, _Group())
            group.units[metric.name] = cloudwatch_unit(metric.unit)
            if metric.kind is MetricKind.COUNTER:
                group.sums[metric.name] = group.sums.get(metric.name, 0.0) + value
            else:
                group.values.setdefault(metric.name, []).append(value)
                self._buffered += 1
            if (
                len(self._groups) >= MAX_GROUPS
                or self._buffered >= MAX_BUFFERED_VALUES
                or now - self._opened >= self._interval
            ):
                full = self._take()
        if full:
            self._write(full)

    def flush(self) -> None:
        with self._lock:
            groups = self._take()
        if groups:
            self._write(groups)

    def _dimensions(self, attributes: Mapping[str, str]) -> _Dimensions:
        """The dimensions of ``attributes`` (remembered: the engine records few sets)."""
        key = tuple(attributes.items())
        known = self._known.get(key)
        if known is None:
            known = self._name_dimensions(attributes)
            if len(self._known) < MAX_GROUPS:
                self._known[key] = known
        return known

    def _name_dimensions(self, attributes: Mapping[str, str]) -> _Dimensions:
        named = {self._environment[0]: self._environment[1]}
        for key in sorted(attributes):
            name = dimension_name(key)
            if name not in named and len(named) < MAX_DIMENSIONS:
                named[name] = _dimension_value(attributes[key])
        return tuple(sorted(named.items()))

    def _take(self) -> dict[_Dimensions, _Group]:
        groups, self._groups, self._buffered = self._groups, {}, 0
        return groups

    def _write(self, groups: dict[_Dimensions, _Group]) -> None:
        timestamp = int(self._clock() * 1000)
        stream = self._stream or sys.stdout
        with self._write_lock:
            try:
                for dimensions, group in groups.items():
                    for document in self._documents(timestamp, dimensions, group):
                        stream.write(json.dumps(document, separators=(",", ":")) + "\n")
                stream.flush()
            except (OSError, ValueError) as error:
                if not self._warned:
                    self._warned = True
                    _logger.warning("EMF metrics dropped: cannot write them (%s)", error)

    def _documents(
        self, timestamp: int, dimensions: _Dimensions, group: _Group
    ) -> Iterator[dict[str, Any]]:
        """The group's documents: values in slices of 100, metrics in sets of 100."""
        rows: list[dict[str, float | list[float]]] = [
            {name: total for name, total in group.sums.items() if math.isfinite(total)}
        ]
        for name, values in group.values.items():
            for index, start in enumerate(range(0, len(values), MAX_VALUES_PER_METRIC)):
                if index == len(rows):
                    rows.append({})
                rows[index][name] = values[start : start + MAX_VALUES_PER_METRIC]
        for row in rows:
            names = list(row)
            for start in range(0, len(names), MAX_METRICS_PER_DOCUMENT):
                chunk = names[start : start + MAX_METRICS_PER_DOCUMENT]
                directive = {
                    "Namespace": self.namespace,
                    "Dimensions": [[name for name, _ in dimensions]],
                    "Metrics": [{"Name": name, "Unit": group.units[name]} for name in chunk],
                }
                meta = {"Timestamp": timestamp, "CloudWatchMetrics": [directive]}
                yield {"_aws": meta, **dict(dimensions), **{name: row[name] for name in chunk}}
