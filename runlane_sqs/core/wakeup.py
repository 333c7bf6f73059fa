"""Wakeup messages: small JSON hints naming a run. Never payload, never state.

A wakeup may carry a :class:`ClaimHint`: the run's sequence, attempt count and task when
it was published (and, when maintenance first looks at the run early, that time), so a
worker can claim it with one conditional write instead of a read and a write. The hint
is only a guess the write is conditioned on: a stale or forged hint costs a refused
write, never a wrong claim (docs/design/storage.md, "Claims").

Parsing is strict: anything that is not exactly a wakeup of a known version is
rejected with :class:`MalformedWakeup`, which the worker logs and deletes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import Run, WaitKind, is_run_id
from runlane_sqs.core.names import ENVIRONMENT_PATTERN, QUEUE_PATTERN, TASK_PATTERN
from runlane_sqs.core.telemetry import MAX_TRACE_CHARS

WAKEUP_VERSION = 1
MAX_WAKEUP_BYTES = 4096
"""A wakeup body longer than this is rejected unread."""

_FIELDS = frozenset({"version", "environment", "run_id", "queue", "requested_at", "trace", "hint"})
_REQUIRED = _FIELDS - {"trace", "hint"}
_HINT_FIELDS = frozenset({"seq", "attempt", "task", "at", "start"})
_REQUIRED_HINT_FIELDS = _HINT_FIELDS - {"at", "start"}
START_MARK = '"start":'
"""In the body of a wakeup whose hint names a reserved start (and rarely in another): a
worker parses only such a body before it starts the wakeup's attempt."""
MAX_HINT_NUMBER = 2**31 - 1
MAX_HINT_TIME_MS = 253402300799999
"""9999-12-31T23:59:59.999Z: the latest ``at`` a hint may carry."""


class MalformedWakeup(RunlaneError):
    """A message body that is not a valid wakeup."""


@dataclass(frozen=True, slots=True)
class ClaimHint:
    """What the run looked like when its wakeup was published: runnable, not waiting for
    anything but a time, at sequence ``seq`` after ``attempt`` attempts of ``task``."""

    seq: int
    attempt: int
    task: str
    review_at: datetime | None = None
    """The run's early agenda listing (its ``review_at``), if it had one."""
    start: datetime | None = None
    """The run's reserved start under its rate limits (its ``rate_start``), if it sleeps for one: a
    worker that receives the wakeup early holds it until then, its threads free."""

    @classmethod
    def of(cls, run: Run) -> ClaimHint | None:
        """The hint for ``run``, or ``None`` when a claim needs more of it than a hint
        says (a run that is not runnable, or waits for a signal, a token or a run)."""
        if not run.status.is_runnable:
            return None
        if run.waiting is not None and run.waiting.kind is not WaitKind.TIME:
            return None
        return cls(run.seq, run.attempt, run.task, run.review_at, run.rate_start)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seq": self.seq, "attempt": self.attempt, "task": self.task}
        if self.review_at is not None:
            data["at"] = to_epoch_ms(self.review_at)
        if self.start is not None:
            data["start"] = to_epoch_ms(self.start)
        return data


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Tells a worker which run to look at; the worker re-reads storage before acting
    (or claims with a write conditioned on the ``hint``)."""

    environment: str
    run_id: str
    queue: str
    requested_at: datetime
    trace: str | None = None
    hint: ClaimHint | None = None

    @classmethod
    def for_run(cls, run: Run, requested_at: datetime, trace: str | None = None) -> Wakeup:
        """A wakeup for ``run`` carrying ``trace`` (by default the run's own context)."""
        return cls(
            run.environment,
            run.id,
            run.queue,
            requested_at,
            trace=trace or run.trace,
            hint=ClaimHint.of(run),
        )

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "version": WAKEUP_VERSION,
            "environment": self.environment,
            "run_id": self.run_id,
            "queue": self.queue,
            "requested_at": self.requested_at.astimezone(UTC).isoformat(),
        }
        if self.trace is not None:
            body["trace"] = self.trace
        if self.hint is not None:
            body["hint"] = self.hint.to_json()
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def parse_wakeup(body: str | bytes) -> Wakeup:
    """Parse a message body, or raise :class:`MalformedWakeup` saying what is wrong."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if len(raw) > MAX_WAKEUP_BYTES:
        raise MalformedWakeup(f"body is {len(raw)} bytes; a wakeup is at most {MAX_WAKEUP_BYTES}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedWakeup(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise MalformedWakeup("body nests too deeply to be a wakeup") from None
    if not isinstance(data, dict):
        raise MalformedWakeup("body is not a JSON object")
    keys = set(data)
    if missing := _REQUIRED - keys:
        raise MalformedWakeup(f"missing fields: {sorted(missing)}")
    if extra := keys - _FIELDS:
        raise MalformedWakeup(f"unknown fields: {sorted(extra)}")
    return _build(data)


def _build(data: dict[str, Any]) -> Wakeup:
    version = data["version"]
    if type(version) is not int or version != WAKEUP_VERSION:
        raise MalformedWakeup(f"unsupported version {version!r}")
    environment, run_id, queue = data["environment"], data["run_id"], data["queue"]
    if not isinstance(environment, str) or not ENVIRONMENT_PATTERN.fullmatch(environment):
        raise MalformedWakeup(f"bad environment {environment!r}")
    if not is_run_id(run_id):
        raise MalformedWakeup(f"bad run_id {run_id!r}")
    if not isinstance(queue, str) or not QUEUE_PATTERN.fullmatch(queue):
        raise MalformedWakeup(f"bad queue {queue!r}")
    trace = data.get("trace")
    if trace is not None and (not isinstance(trace, str) or len(trace) > MAX_TRACE_CHARS):
        raise MalformedWakeup(f"trace must be a string of at most {MAX_TRACE_CHARS} characters")
    return Wakeup(
        environment=environment,
        run_id=run_id,
        queue=queue,
        requested_at=_parse_time(data["requested_at"]),
        trace=trace,
        hint=_parse_hint(data["hint"]) if "hint" in data else None,
    )


def _parse_hint(value: object) -> ClaimHint:
    if (
        not isinstance(value, dict)
        or not set(value) >= _REQUIRED_HINT_FIELDS
        or not set(value) <= _HINT_FIELDS
    ):
        raise MalformedWakeup(
            f"hint must be an object with {sorted(_REQUIRED_HINT_FIELDS)} and optionally "
            "'at' and 'start'"
        )
    seq, attempt, task = value["seq"], value["attempt"], value["task"]
    for name, number in (("seq", seq), ("attempt", attempt)):
        if type(number) is not int or not 0 <= number <= MAX_HINT_NUMBER:
            raise MalformedWakeup(f"hint {name} must be a whole number, not {number!r}")
    if seq < 1:
        raise MalformedWakeup(f"hint seq must be at least 1, not {seq}")
    if not isinstance(task, str) or not TASK_PATTERN.fullmatch(task):
        raise MalformedWakeup(f"bad hint task {task!r}")
    review_at, start = (_hint_time(value, name) for name in ("at", "start"))
    return ClaimHint(seq=seq, attempt=attempt, task=task, review_at=review_at, start=start)


def _hint_time(hint: dict[str, Any], name: str) -> datetime | None:
    if name not in hint:
        return None
    at = hint[name]
    if type(at) is not int or not 0 <= at <= MAX_HINT_TIME_MS:
        raise MalformedWakeup(f"hint {name} must be a time in epoch milliseconds, not {at!r}")
    return from_epoch_ms(at)


def held_until(body: str) -> datetime | None:
    """The reserved start a wakeup's hint names (see :attr:`ClaimHint.start`), read only from a
    body that has one; ``None`` for any other body, even a malformed one (the worker's
    path rejects that)."""
    if START_MARK not in body:
        return None
    try:
        hint = parse_wakeup(body).hint
    except MalformedWakeup:
        return None
    return hint.start if hint is not None else None


def _parse_time(value: object) -> datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise MalformedWakeup(f"bad requested_at {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedWakeup(f"bad requested_at {value!r}") from None
    if parsed.tzinfo is None:
        raise MalformedWakeup("requested_at must carry a UTC offset")
    return parsed


def delay_seconds(delay: timedelta | None) -> int:
    """SQS ``DelaySeconds`` for a wakeup due after ``delay`` (rounded up, at most 900)."""
    if delay is None or delay <= timedelta(0):
        return 0
    return min(MAX_DELAY_SECONDS, math.ceil(delay.total_seconds()))
