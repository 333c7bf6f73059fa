"""The coalescing of an attempt's reports (runlane_sqs/core/progress.py), by hand: no
clock but the times passed in, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.core.model import Progress
from runlane_sqs.core.progress import AttemptReport, ReportBuffer

T0 = datetime(2030, 1, 1, tzinfo=UTC)
INTERVAL = timedelta(seconds=2)


def done(n: int) -> AttemptReport:
    return AttemptReport(progress=Progress(n, 10))


def test_the_first_report_is_due_at_once_and_later_ones_an_interval_after_the_last_write() -> None:
    buffer = ReportBuffer(INTERVAL)
    assert buffer.add(done(1)) is True  # nothing was pending: the keeper is nudged
    assert buffer.take(T0) == done(1)
    assert buffer.add(done(2)) is True
    assert buffer.add(done(3)) is False  # already pending: no nudge
    assert buffer.take(T0 + timedelta(seconds=1)) is None
    assert buffer.due_at() == T0 + INTERVAL
    assert buffer.take(T0 + INTERVAL) == done(3)  # the last one wins
    assert buffer.take(T0 + 10 * INTERVAL) is None  # nothing pending


def test_a_report_in_flight_when_the_attempt_ends_rides_on_the_outcome() -> None:
    """The keeper took a report and its write is in flight when the outcome is decided:
    if the outcome lands first, that write is refused, so the outcome must carry it."""
    buffer = ReportBuffer(INTERVAL)
    buffer.add(AttemptReport(progress=Progress(1, 10), state={"page": 1}))
    sending = buffer.take(T0)
    buffer.add(done(2))
    assert sending is not None
    final = buffer.final()
    assert final == AttemptReport(progress=Progress(2, 10), state={"page": 1})
    buffer.sent(sending, written=True)
    assert buffer.final() == done(2)


def test_a_write_storage_failed_is_pending_again_under_what_came_since() -> None:
    buffer = ReportBuffer(INTERVAL)
    buffer.add(AttemptReport(state={"page": 1}))
    sending = buffer.take(T0)
    assert sending is not None
    buffer.add(done(5))
    buffer.sent(sending, written=False)
    assert buffer.pending == AttemptReport(progress=Progress(5, 10), state={"page": 1})


def test_a_state_set_to_none_is_a_report_and_clears_the_stored_one() -> None:
    cleared = AttemptReport(state=None)
    assert cleared.has_state and cleared.attributes() == ("state",)
    assert AttemptReport(state={"a": 1}).then(cleared).state is None
    assert not done(1).has_state and done(1).attributes() == ("progress",)
