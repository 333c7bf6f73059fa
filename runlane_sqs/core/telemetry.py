"""The vocabulary of traces and metrics (docs/observability.md), and the stored form of a
run's trace context.

A run's trace context is the W3C ``traceparent`` of the span that triggered it, and its
``tracestate`` when there is one, packed into one string: ``traceparent`` alone, or
``traceparent;tracestate``. It is stored on the run item and carried in every wakeup's
``trace`` field (at most :data:`MAX_TRACE_CHARS` characters; a ``tracestate`` that would
not fit is dropped). A stored or received context that is not
exactly that shape is ignored, never an error: a wakeup is only a hint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

MAX_TRACE_CHARS = 512
"""Longest packed trace context carried in a wakeup and stored on a run."""
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")


def pack_trace(traceparent: str | None, tracestate: str | None = None) -> str | None:
    """The stored form of a W3C trace context (``None`` without a valid ``traceparent``)."""
    if traceparent is None or not _TRACEPARENT.fullmatch(traceparent):
        return None
    if tracestate and _TRACESTATE.fullmatch(tracestate):
        packed = f"{traceparent};{tracestate}"
        if len(packed) <= MAX_TRACE_CHARS:
            return packed
    return traceparent


def unpack_trace(trace: str | None) -> dict[str, str]:
    """The W3C headers of a packed trace context (empty when it is absent or malformed)."""
    if not trace or len(trace) > MAX_TRACE_CHARS:
        return {}
    traceparent, _, tracestate = trace.partition(";")
    if not _TRACEPARENT.fullmatch(traceparent):
        return {}
    headers = {"traceparent": traceparent}
    if tracestate and _TRACESTATE.fullmatch(tracestate):
        headers["tracestate"] = tracestate
    return headers


def trace_id_of(trace: str | None) -> str | None:
    """The 32-hex-digit trace id of a packed trace context."""
    headers = unpack_trace(trace)
    return headers["traceparent"][3:35] if headers else None


class SpanKind(Enum):
    """The OpenTelemetry span kinds runlane-sqs uses."""

    INTERNAL = "internal"
    PRODUCER = "producer"
    CONSUMER = "consumer"


# Span names: "<operation> <task>" for the spans of one run, fixed names for the others.
TRIGGER = "trigger"
PUBLISH = "publish"
ATTEMPT = "attempt"
MAINTENANCE_PASS = "runlane maintenance pass"
DECIDE_TOKEN = "runlane decide token"
SEND_SIGNAL = "runlane send signal"

# Attribute keys: OpenTelemetry's messaging conventions where they fit, runlane.* else.
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_SQS = "aws_sqs"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_SIZE = "messaging.batch.message_count"
RUN_ID = "runlane.run.id"
TASK = "runlane.task"
QUEUE = "runlane.queue"
ATTEMPT_NUMBER = "runlane.attempt"
OUTCOME = "runlane.outcome"
REASON = "runlane.reason"
ACTION = "runlane.action"
ENVIRONMENT = "runlane.environment"
PASS_ID = "runlane.maintenance.pass_id"
TOKEN_ID = "runlane.token.id"
SIGNAL = "runlane.signal"
SCHEDULE = "runlane.schedule"
RESUMED = "runlane.resumed"
"""How many waiting runs a token decision or a signal resumed."""
TAG_PREFIX = "runlane.tag."
"""A run's tags on its spans: ``runlane.tag.customer = "42"`` (docs/tags.md)."""


def tag_attributes(tags: Mapping[str, str]) -> dict[str, str]:
    """A run's tags as span attributes."""
    return {f"{TAG_PREFIX}{key}": value for key, value in tags.items()}


class MetricKind(Enum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Metric:
    """One instrument: its name, kind, unit (UCUM, as OpenTelemetry writes it), what it
    counts and the attributes it is recorded with."""

    name: str
    kind: MetricKind
    unit: str
    description: str
    attributes: tuple[str, ...]


RUNS_TRIGGERED = Metric(
    "runlane.runs.triggered",
    MetricKind.COUNTER,
    "{run}",
    "Runs created by trigger, trigger_many, schedules, retries and reruns.",
    (TASK, QUEUE),
)
ATTEMPTS_STARTED = Metric(
    "runlane.attempts.started",
    MetricKind.COUNTER,
    "{attempt}",
    "Attempts whose handler was called.",
    (TASK, QUEUE),
)
ATTEMPTS_ENDED = Metric(
    "runlane.attempts.ended",
    MetricKind.COUNTER,
    "{attempt}",
    "Attempts by recorded outcome: the run's status after it (succeeded, failed, retrying, "
    "released, cancelled), or lease_lost when nothing could be recorded.",
    (TASK, QUEUE, OUTCOME),
)
ATTEMPT_DURATION = Metric(
    "runlane.attempt.duration",
    MetricKind.HISTOGRAM,
    "s",
    "From an attempt's start to its recorded outcome.",
    (TASK, OUTCOME),
)
WAKEUP_LAG = Metric(
    "runlane.wakeup.lag",
    MetricKind.HISTOGRAM,
    "s",
    "From the wakeup's requested_at (its publish time plus its delay) to the attempt's start.",
    (TASK, QUEUE),
)
WAKEUPS_SKIPPED = Metric(
    "runlane.wakeups.skipped",
    MetricKind.COUNTER,
    "{wakeup}",
    "Wakeups that led to no attempt, by reason: terminal, leased, not_due, claim_lost, "
    "unknown_run, unknown_task, waiting_for_slot, malformed, foreign_environment.",
    (REASON,),
)
RUNS_DELAYED = Metric(
    "runlane.runs.delayed",
    MetricKind.COUNTER,
    "{run}",
    "Runs a limit made wait instead of starting, by reason: slot (a concurrency limit "
    "was full when the run was claimed).",
    (TASK, QUEUE, REASON),
)
MAINTENANCE_RUNS = Metric(
    "runlane.maintenance.runs",
    MetricKind.COUNTER,
    "{run}",
    "What maintenance passes did, by action: published, recovered, timed_out, cancelled, "
    "scheduled, conflicts.",
    (ACTION,),
)
MAINTENANCE_DURATION = Metric(
    "runlane.maintenance.duration",
    MetricKind.HISTOGRAM,
    "s",
    "How long each maintenance pass took.",
    (),
)
METRICS = (
    RUNS_TRIGGERED,
    ATTEMPTS_STARTED,
    ATTEMPTS_ENDED,
    ATTEMPT_DURATION,
    WAKEUP_LAG,
    WAKEUPS_SKIPPED,
    RUNS_DELAYED,
    MAINTENANCE_RUNS,
    MAINTENANCE_DURATION,
)
