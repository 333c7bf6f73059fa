"""What a running attempt reports about itself: its progress (``ctx.progress``) and its
state (``ctx.set_state``), the checks they pass before anything is kept, and the
coalescing of reports into at most one write per run per interval (docs/progress.md).

Timeline of one attempt that reports (interval 2 s, a report every millisecond):

    t=0      report 1     pending, none written yet: due at once   -> write (report 1)
    t=0..2   reports 2..  pending, last one wins                   (no write)
    t=2      flush        due (2 s since the last write)           -> write (last report)
    ...
    outcome  pending      the last report rides on the outcome's own write (no request)

No I/O and no clock here: the runtime passes ``now`` in and sends the writes
(:class:`~runlane_sqs.runtime.executor.LeaseBook`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from runlane_sqs.core.clock import EPOCH, from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import InvalidPayloadError
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import JSON, Progress, Run
from runlane_sqs.core.values import encode_json

DEFAULT_PROGRESS_INTERVAL_SECONDS = 2.0
"""At most one progress write per run per this interval, unless configured otherwise."""
MIN_PROGRESS_INTERVAL = timedelta(milliseconds=100)
MAX_PROGRESS_MESSAGE_CHARS = 500
"""Longest ``message`` of ``ctx.progress`` (characters)."""
MAX_STATE_BYTES = 8 * 1024
"""Largest ``ctx.set_state`` value, in bytes of compact JSON: it is written with every
progress write, whose cost grows with the whole run item (docs/progress.md, "Costs")."""


def checked_progress(
    done: object, total: object, message: object, *, attempt: int, now: datetime
) -> Progress:
    """``ctx.progress``'s arguments as a :class:`Progress`, or :class:`InvalidPayloadError`
    saying which one is wrong. ``message`` is any text (stored as is, shown escaped), at
    most :data:`MAX_PROGRESS_MESSAGE_CHARS` characters."""
    checked_done = _number("done", done)
    checked_total = None if total is None else _number("total", total)
    if message is not None:
        if not isinstance(message, str):
            raise InvalidPayloadError(
                f"progress message must be a string, not {type(message).__name__}"
            )
        if len(message) > MAX_PROGRESS_MESSAGE_CHARS:
            raise InvalidPayloadError(
                f"progress message is {len(message)} characters; "
                f"the limit is {MAX_PROGRESS_MESSAGE_CHARS}"
            )
        encode_json(message, what="progress message", limit_bytes=4 * MAX_PROGRESS_MESSAGE_CHARS)
    return Progress(checked_done, checked_total, message, attempt, now)


def _number(name: str, value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidPayloadError(f"progress {name} must be a finite number, not {value!r}")
    if value < 0:
        raise InvalidPayloadError(f"progress {name} must not be negative, not {value!r}")
    return value


def checked_state(value: JSON) -> JSON:
    """``value`` as it will be read back (checked JSON within :data:`MAX_STATE_BYTES`)."""
    text = encode_json(value, what="run state", limit_bytes=MAX_STATE_BYTES)
    return json.loads(text)


def progress_text(progress: Progress) -> str:
    """The stored form of a progress: compact JSON, its time in epoch milliseconds."""
    data: dict[str, Any] = {"done": progress.done, "attempt": progress.attempt}
    if progress.total is not None:
        data["total"] = progress.total
    if progress.message is not None:
        data["message"] = progress.message
    if progress.at is not None:
        data["at"] = to_epoch_ms(progress.at)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def progress_from_text(text: str) -> Progress | None:
    """The progress a stored text holds (``None`` if it is not one, as ``ctx.progress``
    would have checked it: never raises, a reader of a run must not fail on what was
    written to its item, by a report or behind the library's back)."""
    try:
        data = json.loads(text)
        total, message = data.get("total"), data.get("message")
        if message is not None and not isinstance(message, str):
            return None
        return Progress(
            done=_number("done", data["done"]),
            total=None if total is None else _number("total", total),
            message=message,
            attempt=int(data.get("attempt", 0)),
            at=from_epoch_ms(int(data["at"])) if "at" in data else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None
    except InvalidPayloadError:  # a number ctx.progress would have refused
        return None


def state_from_text(text: str) -> JSON:
    """The state a stored text holds (``None`` if it is not JSON: never raises)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """Progress and state an attempt reported and that is not written yet; a field left
    unset was not reported (a state set to ``None`` was: it clears the stored one)."""

    progress: Progress | None = None
    state: JSON = _UNSET

    @property
    def has_state(self) -> bool:
        return self.state is not _UNSET

    def then(self, later: AttemptReport) -> AttemptReport:
        """This report followed by ``later``: the last value of each field wins."""
        return AttemptReport(
            later.progress if later.progress is not None else self.progress,
            later.state if later.has_state else self.state,
        )

    def applied(self, run: Run) -> Run:
        """``run`` as it is once this report is written."""
        changes: dict[str, Any] = {}
        if self.progress is not None:
            changes["progress"] = self.progress
        if self.has_state:
            changes["state"] = self.state
        return replace(run, **changes)

    def attributes(self) -> tuple[str, ...]:
        """The run item's attributes this report writes."""
        return (("progress",) if self.progress is not None else ()) + (
            ("state",) if self.has_state else ()
        )


@dataclass
class ReportBuffer:
    """The reports of one attempt not written yet, and when the last write was sent: the
    coalescing decision, with ``now`` passed in (not thread-safe: its owner locks it).

    The first report is due at once; later ones once ``interval`` has passed since the
    last write was sent, however many came meanwhile (the last one wins). What a write
    took stays ``sending`` until its answer came, so the outcome write can carry it if
    that write was refused because the outcome landed first."""

    interval: timedelta
    pending: AttemptReport | None = None
    sending: AttemptReport | None = None
    last_sent: datetime | None = None

    def add(self, report: AttemptReport) -> bool:
        """Take in a report; returns whether nothing was pending before (the keeper then
        has a new due time to wait for)."""
        fresh = self.pending is None
        self.pending = report if self.pending is None else self.pending.then(report)
        return fresh

    def due_at(self) -> datetime | None:
        """When the pending report should be written (``None``: nothing pending)."""
        if self.pending is None:
            return None
        if self.last_sent is None:
            return EPOCH
        return self.last_sent + self.interval

    def take(self, now: datetime) -> AttemptReport | None:
        """The report to write now, if one is due: it is ``sending`` until :meth:`sent`."""
        due = self.due_at()
        if due is None or due > now:
            return None
        report = self.pending
        assert report is not None
        self.pending, self.sending, self.last_sent = None, report, now
        return report

    def sent(self, report: AttemptReport, *, written: bool) -> None:
        """The write of ``report`` was answered: written or refused, or not written
        (storage failed), when it is pending again, under what came since."""
        if self.sending is report:
            self.sending = None
        if not written:
            self.pending = report if self.pending is None else report.then(self.pending)

    def final(self) -> AttemptReport | None:
        """What the outcome write carries: the report in flight followed by the pending
        one (``None``: everything reported was written)."""
        if self.sending is None:
            return self.pending
        return self.sending if self.pending is None else self.sending.then(self.pending)


def with_report(transition: Transition, report: AttemptReport) -> Transition:
    """``transition`` (an attempt's outcome) carrying the attempt's last ``report``,
    written whatever the writer last read of it."""
    return replace(transition, after=report.applied(transition.after), rewrites=report.attributes())
