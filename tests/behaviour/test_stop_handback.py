"""A stopping worker hands back at once every wakeup it received and did not start, the
same with the sync ``Worker`` and the asyncio ``AsyncWorker`` (``worker_kind``): those
buffered, those held for their run's reserved start (even when the hold comes after the
stop began), and those its open long poll brings in after the stop.

SQS keeps a long poll open after the process that sent it has gone: a message that
arrives meanwhile is taken by it, invisible to every worker until its visibility
timeout. So a stopping worker returns only once its open poll has returned, and hands
back what it brought.

In memory only: the transport here is the in-memory one with SQS's long poll in real
time (:class:`LongPolls`), which can say what a poll took after its worker had returned
(what a real process would no longer be there to hand back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import ManualClock, RateLimit, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core.model import Run
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.testing import InMemoryRunStore
from tests.emulators import wait_until
from tests.workers import WorkerKind

TIMEOUT_SECONDS = 10.0
GRACE_SECONDS = 30.0
"""Longer than any wait of the test: a wakeup kept until the grace period ends shows."""
VISIBILITY_TIMEOUT_SECONDS = 900.0
"""Far longer than any test: a message visible again was handed back, not timed out."""
QUICK = "handback.quick"
BLOCKER = "handback.blocker"
RATED = "handback.rated"
RATE_INTERVAL_SECONDS = 10
"""One start per 10 s: the second run's start is reserved 10 s ahead, inside the 20 s a
worker holds a wakeup for (``MAX_HOLD``)."""


class LongPolls(InMemoryTransport):
    """In-memory queues with SQS's long poll: a receive waits (in real time) until a
    message is visible or its wait ends, and takes what comes whether or not its worker
    is still there to read the answer. Set ``exited`` when the worker has returned (its
    process would end there): what a receive takes from then on is recorded in
    ``lost``."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, visibility_timeout=VISIBILITY_TIMEOUT_SECONDS)
        self._arrived = threading.Condition()
        self.open_polls = 0
        self.exited = False
        self.lost: list[str] = []
        self.released: list[str] = []

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        unsent = super().publish(wakeups, delay)
        self._wake_polls()
        return unsent

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        super().release(messages)
        self.released.extend(m.message_id for m in messages)
        self._wake_polls()

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        deadline = time.monotonic() + wait_seconds
        with self._arrived:
            self.open_polls += 1
            try:
                while not (taken := super().receive(queue, max_messages, 0)):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._arrived.wait(left)
            finally:
                self.open_polls -= 1
            if self.exited:
                self.lost.extend(m.message_id for m in taken)
        return taken

    def _wake_polls(self) -> None:
        with self._arrived:
            self._arrived.notify_all()


class Tasks:
    """``quick`` returns at once; ``blocker`` keeps its slot until its cancellation is
    set and then until ``let_go`` (a handler finishing its work within the grace
    period); ``rated`` may start once per :data:`RATE_INTERVAL_SECONDS`."""

    def __init__(self) -> None:
        self.blocking = threading.Event()
        self.let_go = threading.Event()

    def register(self, app: Runlane) -> None:
        app.task(self.quick, name=QUICK)
        app.task(self.blocker, name=BLOCKER)
        app.task(self.quick, name=RATED, rate_limits=[RateLimit(1, per=RATE_INTERVAL_SECONDS)])

    @staticmethod
    def quick(ctx: TaskContext, payload: Any) -> Any:
        return payload

    def blocker(self, ctx: TaskContext, payload: Any) -> Any:
        self.blocking.set()
        assert ctx.cancellation.wait(TIMEOUT_SECONDS)
        assert self.let_go.wait(GRACE_SECONDS)
        return payload


class GatedRead:
    """Holds the worker's first read of one run until :meth:`open` (installed as the
    store's ``get_run``)."""

    def __init__(self, app: Runlane, run_id: str) -> None:
        self._read = app.store.get_run
        self._run_id = run_id
        self.reached = threading.Event()
        self._open = threading.Event()

    def __call__(self, run_id: str) -> Run | None:
        if run_id == self._run_id and not self._open.is_set():
            self.reached.set()
            assert self._open.wait(TIMEOUT_SECONDS), "the read was never let through"
        return self._read(run_id)

    def open(self) -> None:
        self._open.set()


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def transport(clock: ManualClock) -> LongPolls:
    return LongPolls(clock)


@pytest.fixture
def app(clock: ManualClock, transport: LongPolls, tasks: Tasks) -> Runlane:
    app = Runlane(
        clock=clock, store=InMemoryRunStore("test"), transport=transport, environment="test"
    )
    tasks.register(app)
    return app


def counts(transport: LongPolls) -> tuple[int, int]:
    """Visible and in-flight messages of the default queue."""
    backlog = transport.backlog("default")
    return backlog.visible, backlog.in_flight


def test_a_stopped_worker_returns_only_once_its_open_long_poll_has_returned(
    worker_kind: WorkerKind, app: Runlane, transport: LongPolls
) -> None:
    """Had it returned (and its process ended) with the poll still open, the wakeup of a
    run triggered just after would be taken by that poll: in flight for nobody until its
    visibility timeout."""
    with worker_kind.running(app, wait_seconds=1) as started:
        wait_until(lambda: transport.open_polls == 1, TIMEOUT_SECONDS, "the worker's long poll")
        started.stop()
    transport.exited = True

    run = app.trigger(QUICK)
    wait_until(lambda: transport.open_polls == 0, TIMEOUT_SECONDS, "every poll to end")

    assert transport.lost == []
    assert counts(transport) == (1, 0)
    assert app.runs.get(run.id).status is RunStatus.QUEUED


def test_what_the_open_long_poll_brings_after_the_stop_is_handed_back_before_it_returns(
    worker_kind: WorkerKind, app: Runlane, transport: LongPolls
) -> None:
    """A run is triggered after the stop, while the worker's poll is open: the poll takes
    its wakeup, and the worker makes it visible again before it returns."""
    with worker_kind.running(app, wait_seconds=5) as started:
        wait_until(lambda: transport.open_polls == 1, TIMEOUT_SECONDS, "the worker's long poll")
        started.worker.stop()
        run = app.trigger(QUICK)  # its wakeup ends the open poll at once
        started.join()
    transport.exited = True

    assert transport.lost == []
    assert counts(transport) == (1, 0)
    assert len(transport.released) == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.QUEUED, 0)


def test_a_wakeup_held_for_its_reserved_start_after_the_stop_began_is_handed_back_at_once(
    worker_kind: WorkerKind,
    app: Runlane,
    transport: LongPolls,
    tasks: Tasks,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second rated run's wakeup is being handled when the stop comes: the worker
    already handed back what it had buffered when its read returns, and the run must
    wait 10 s for its start. Its wakeup is handed back then, not kept until the blocker
    ends the grace period."""
    app.trigger(RATED)
    assert worker_kind.drain(app) == 1  # the interval's one start is taken
    second = app.trigger(RATED)
    app.trigger(BLOCKER)
    buffered = app.trigger(BLOCKER)  # two slots: this one waits in the buffer
    gate = GatedRead(app, second.id)
    monkeypatch.setattr(app.store, "get_run", gate)

    with worker_kind.running(app, concurrency=2, grace_period=GRACE_SECONDS) as started:
        try:
            assert gate.reached.wait(TIMEOUT_SECONDS) and tasks.blocking.wait(TIMEOUT_SECONDS)
            assert counts(transport) == (0, 3)
            started.worker.stop()
            wait_until(lambda: len(transport.released) == 1, TIMEOUT_SECONDS, "the buffer back")
            assert counts(transport) == (1, 2)  # the buffered one; the blocker still runs
            gate.open()

            wait_until(
                lambda: counts(transport) == (2, 1),
                TIMEOUT_SECONDS,
                "the held wakeup to be handed back while the blocker finishes",
            )
        finally:
            gate.open()
            tasks.let_go.set()
    transport.exited = True

    assert counts(transport) == (2, 0)
    assert app.runs.get(buffered.id).status is RunStatus.QUEUED
    waiting = app.runs.get(second.id)
    assert (waiting.status, waiting.attempt) == (RunStatus.QUEUED, 0)
    assert waiting.due_at is not None and waiting.due_at > app.engine.clock.now()
