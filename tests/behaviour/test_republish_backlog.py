"""A wakeup waiting behind a backlog is late, not lost: maintenance republishes a due
run only once its queue has been seen drained since the run's wakeup became visible, or
``republish_max`` after it (docs/concepts.md, "Lost wakeups"). On every backend, time
moved by hand."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.reports import PassReport
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.testing import InMemoryRunStore
from tests.apps.recovery_tasks import PLAIN_TASK, register_recovery
from tests.backends import Backend
from tests.behaviour.maintenance_support import QUEUE, take_wakeups
from tests.behaviour.worker_support import drain

BACKLOG = 12


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register_recovery)


def due_wakeups(report: PassReport) -> tuple[int, int]:
    """What the pass's ``due_wakeups`` job did: (republished, held back in line)."""
    return report.due.published, report.due.in_line


def test_a_backlog_older_than_republish_after_is_not_republished(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    """Nobody consumes for a while: every run's wakeup waits in line. The pass writes
    each run once (listed later) and sends nothing; the queue holds one wakeup per run,
    and once consumers return every run runs once."""
    runs = [app.trigger(PLAIN_TASK, {"n": n}) for n in range(BACKLOG)]
    clock.advance(app.config.republish_after)

    assert due_wakeups(app.maintenance.run_pass()) == (0, BACKLOG)
    clock.advance(app.config.republish_after * 2)
    assert due_wakeups(app.maintenance.run_pass()) == (0, BACKLOG)  # backed off, still in line

    assert backend.depth(app) == BACKLOG
    assert drain(app) == BACKLOG
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in runs)


def test_a_lost_wakeup_is_republished_once_the_queue_is_seen_drained(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    lost = app.trigger(PLAIN_TASK, {"lost": True})
    assert take_wakeups(app) == {lost.id: 1}  # deleted unhandled
    waiting = app.trigger(PLAIN_TASK, {"lost": False})
    clock.advance(app.config.republish_after)

    # the queue still holds a wakeup: it cannot tell a lost one from one in line yet
    assert due_wakeups(app.maintenance.run_pass()) == (0, 2)
    assert drain(app) == 1 and app.runs.get(waiting.id).status is RunStatus.SUCCEEDED

    clock.advance(app.runs.get(lost.id).wake_at - clock.now())  # type: ignore[operator]
    assert due_wakeups(app.maintenance.run_pass()) == (1, 0)  # drained since: lost
    assert drain(app) == 1 and app.runs.get(lost.id).status is RunStatus.SUCCEEDED


def test_a_wakeup_delayed_for_later_does_not_hold_a_lost_one_back(
    app: Runlane, clock: ManualClock
) -> None:
    """The queue's only message is a wakeup delayed until a run's due time: nothing
    visible waits in line, so the queue has been drained and a lost wakeup is
    republished at the first look instead of waiting in line for up to
    ``republish_max`` (the simulation's seed 1 held lost wakeups back for 20 minutes
    behind scheduled runs)."""
    lost = app.trigger(PLAIN_TASK, {"lost": True})
    assert take_wakeups(app) == {lost.id: 1}  # deleted unhandled
    later = app.trigger(PLAIN_TASK, {"later": True}, delay=timedelta(minutes=10))
    clock.advance(app.config.republish_after)

    assert due_wakeups(app.maintenance.run_pass()) == (1, 0)
    assert take_wakeups(app) == {lost.id: 1}
    assert app.runs.get(later.id).status is RunStatus.QUEUED


def test_a_queue_never_seen_drained_gets_its_republish_after_republish_max(
    backend: Backend, app: Runlane, clock: ManualClock
) -> None:
    """A queue that is always busy (here: nobody consumes): a lost wakeup still comes
    back, at most ``republish_max`` after it became visible (so does the other run's,
    waiting in line as long)."""
    run = app.trigger(PLAIN_TASK, None)
    app.trigger(PLAIN_TASK, {"keeps": "the queue busy"})
    assert take_wakeups_of(app, run.id) == 1
    held = 0
    while (wake_at := app.runs.get(run.id).wake_at) is not None and wake_at <= clock.now() + (
        app.config.republish_max
    ):
        clock.advance(wake_at - clock.now())
        published, in_line = due_wakeups(app.maintenance.run_pass())
        if published:
            break
        held += in_line
    assert published == 2 and held >= 4
    assert clock.now() - run.created_at <= app.config.republish_max
    assert take_wakeups(app)[run.id] == 1


def take_wakeups_of(app: Runlane, run_id: str) -> int:
    """Delete the wakeups of ``run_id`` unhandled; put the others back."""
    taken, others = 0, []
    while messages := app.transport.receive(QUEUE, 10, 0):
        mine = [m for m in messages if run_id in m.body]
        taken += len(mine)
        app.transport.ack(mine)
        others.extend(m for m in messages if m not in mine)
    app.transport.release(others)
    return taken


class NoCounts:
    """A transport that cannot count its queues (a wrapper, a queue of another account
    whose attributes are not readable)."""

    def __init__(self, inner: InMemoryTransport) -> None:
        self.inner = inner

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        return self.inner.publish(wakeups, delay)

    def check_queue(self, queue: str) -> None:
        self.inner.check_queue(queue)

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        return self.inner.receive(queue, max_messages, wait_seconds)

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        self.inner.ack(messages)

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        self.inner.release(messages)


def test_without_counts_a_due_run_is_republished_as_before(clock: ManualClock) -> None:
    transport = NoCounts(InMemoryTransport(clock))
    app = Runlane(
        environment="test", clock=clock, store=InMemoryRunStore("test"), transport=transport
    )
    register_recovery(app)
    app.trigger(PLAIN_TASK, None)
    clock.advance(app.config.republish_after)
    assert due_wakeups(app.maintenance.run_pass()) == (1, 0)
    assert transport.inner.depth(QUEUE) == 2
