"""What a lease renewal means for an attempt, stepped by hand: a heartbeat takes a snapshot
of the attempts in flight (``renewals()``), sends their renewals, and settles each answer.
An attempt can finish between the snapshot and the answer; its own outcome write ends the
lease, so that refusal is no lost lease."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.errors import LeaseLost, RunlaneError
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.engine.driver import Begin, CallHandler, ClaimHinted, End, Write
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.runtime.executor import LeaseBook, LeaseKeeper, begin_attempt
from runlane_sqs.testing import ManualClock, in_memory_app

LOST = "lease lost; the attempt's writes will be refused"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    app = in_memory_app(clock=clock)

    @app.task(name="echo")
    def echo(ctx: TaskContext, payload: Any) -> Any:
        return {"echo": payload}

    return app


@dataclass
class Attempt:
    """One attempt stepped by hand up to its handler call, its lease tracked by ``leases``."""

    app: Runlane
    leases: LeaseBook
    run_id: str
    handling: Any
    call: CallHandler

    @classmethod
    def start(cls, app: Runlane, leases: LeaseBook, worker_id: str = "w1") -> Attempt:
        run = app.trigger("echo", 1)
        [message] = app.transport.receive("default", 10, 0)
        path = MessagePath(tasks=app.tasks, clock=app.clock, config=app.config, worker_id=worker_id)
        handling = path.handle(message)
        claim = next(handling)  # a trigger's wakeup carries a hint: one write claims the run
        assert isinstance(claim, ClaimHinted) and claim.claim.run_id == run.id
        begin = handling.send(app.store.claim_hinted(claim.claim))
        assert isinstance(begin, Begin)
        call = handling.send(begin_attempt(begin, app.engine, leases, worker_id))
        assert isinstance(call, CallHandler)
        return cls(app, leases, run.id, handling, call)

    @property
    def ctx(self) -> TaskContext:
        return self.call.ctx

    def finish(self) -> tuple[Run, bool] | None:
        """The handler returns, the lease is no longer tracked, the outcome is written."""
        end = self.handling.send(self.call.task.fn(self.ctx, self.call.payload))
        assert isinstance(end, End) and end.run_id == self.run_id
        untracked = self.leases.untrack(end.run_id, end.token)
        outcome = self.handling.send(untracked)
        assert isinstance(outcome, Write)
        with pytest.raises(StopIteration):
            self.handling.send(self.app.store.apply(outcome.transition))
        return untracked

    def stored(self) -> Run:
        run = self.app.store.get_run(self.run_id)
        assert run is not None
        return run


def renew(app: Runlane, run: Run, lease: Lease) -> Run | RunlaneError:
    """What the heartbeat gets back for one renewal: the stored run or the error."""
    try:
        return app.store.renew_lease(run, lease)
    except RunlaneError as exc:
        return exc


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage() == LOST]


def test_a_refused_renewal_of_an_attempt_that_finished_after_the_snapshot_is_not_lost(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runlane_sqs")
    leases = LeaseBook(app.clock, app.config.lease_duration)
    attempt = Attempt.start(app, leases)
    clock.advance(timedelta(seconds=20))
    [(tracked, lease)] = leases.renewals()  # the heartbeat's snapshot

    assert attempt.finish() == (tracked.run, False, None)  # it finished meanwhile
    renewal = renew(app, tracked.run, lease)
    assert isinstance(renewal, LeaseLost)  # the outcome write ended the lease
    leases.settle(tracked, renewal)

    assert lost_lines(caplog) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not attempt.ctx.cancelled
    assert not tracked.lost
    assert attempt.stored().status is RunStatus.SUCCEEDED
    assert leases.renewals() == []


def test_a_refused_renewal_of_an_attempt_still_in_flight_is_lost(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    leases = LeaseBook(app.clock, app.config.lease_duration)
    attempt = Attempt.start(app, leases)
    clock.advance(app.config.lease_duration + timedelta(seconds=1))
    expired = expire_lease(attempt.stored(), now=clock.now())  # maintenance
    assert isinstance(expired, Transition)
    taken = machine.claim_lease(
        app.store.apply(expired),
        now=clock.now(),
        owner="w2",
        token="t2",
        duration=app.config.lease_duration,
    )
    assert isinstance(taken, Transition)
    app.store.apply(taken)  # another worker holds the lease now
    [(tracked, lease)] = leases.renewals()

    leases.settle(tracked, renew(app, tracked.run, lease))

    assert lost_lines(caplog) == [LOST]
    assert attempt.ctx.cancelled
    assert leases.untrack(attempt.run_id) == (tracked.run, True, None)


def test_a_renewal_answered_after_the_attempt_finished_changes_nothing(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that landed just before the outcome write: its answer (the run still
    running, now with a cancel request) arrives after the attempt ended."""
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    leases = LeaseBook(app.clock, app.config.lease_duration)
    attempt = Attempt.start(app, leases)
    [(tracked, lease)] = leases.renewals()
    answer = renew(app, tracked.run, lease)
    assert isinstance(answer, Run)
    answer = answer.with_changes(status=RunStatus.CANCEL_REQUESTED)

    attempt.finish()
    leases.settle(tracked, answer)

    assert not attempt.ctx.cancelled
    assert "cancellation requested" not in [r.getMessage() for r in caplog.records]


def test_a_newer_attempt_of_the_run_on_the_same_worker_stops_the_older_one_and_keeps_its_lease(
    app: Runlane, clock: ManualClock
) -> None:
    """The older attempt's lease expired (or maintenance timed it out) while its handler
    still ran, and this very worker claimed the run again: the older one is told to stop
    at once, its end is a lost lease, and the newer one's lease is still renewed (simulation
    seed 6, 300 runs: the older attempt ran on unbounded, never told)."""
    leases = LeaseBook(app.clock, app.config.lease_duration)
    older = Attempt.start(app, leases)
    clock.advance(app.config.lease_duration + timedelta(seconds=1))
    expired = expire_lease(older.stored(), now=clock.now())  # maintenance
    assert isinstance(expired, Transition)
    taken = machine.claim_lease(
        app.store.apply(expired),
        now=clock.now(),
        owner="w1",
        token="t2",
        duration=app.config.lease_duration,
    )
    assert isinstance(taken, Transition)
    newer = begin_attempt(Begin(app.store.apply(taken), "t2"), app.engine, leases, "w1")

    assert older.ctx.cancelled and not newer.cancelled
    end = older.handling.send(older.call.task.fn(older.ctx, older.call.payload))
    assert isinstance(end, End)
    untracked = leases.untrack(end.run_id, end.token)
    assert untracked is not None and untracked[1]  # its lease is lost
    with pytest.raises(StopIteration):
        older.handling.send(untracked)  # so its outcome is discarded
    [(tracked, lease)] = leases.renewals()
    assert tracked.ctx is newer
    renewed = renew(app, tracked.run, lease)
    assert isinstance(renewed, Run) and renewed.attempt == 2


class FinishingStore:
    """The in-memory store, but the attempt finishes while its renewal is in flight."""

    def __init__(self, app: Runlane, attempt: Attempt) -> None:
        self.app = app
        self.attempt = attempt
        self.renewals = 0

    def renew_lease(self, run: Run, lease: Lease) -> Run:
        self.renewals += 1
        self.attempt.finish()
        return self.app.store.renew_lease(run, lease)


def test_the_sync_keeper_does_not_report_an_attempt_that_finished_during_its_renewal(
    app: Runlane, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    keeper = LeaseKeeper(app.store, app.clock, app.config.lease_duration)
    attempt = Attempt.start(app, keeper)
    store = FinishingStore(app, attempt)
    keeper._store = store  # type: ignore[assignment]

    keeper.beat()
    keeper.beat()  # nothing is in flight any more: no request

    assert store.renewals == 1
    assert lost_lines(caplog) == []
    assert not attempt.ctx.cancelled
    assert attempt.stored().status is RunStatus.SUCCEEDED


class SlowStore:
    """Renewals that each wait until every renewal of the beat has been sent: a keeper
    that sent them one after another would wait out the timeout on the first."""

    def __init__(self, app: Runlane, expected: int) -> None:
        self.app = app
        self.all_sent = threading.Barrier(expected, timeout=5)

    def renew_lease(self, run: Run, lease: Lease) -> Run:
        self.all_sent.wait()
        return self.app.store.renew_lease(run, lease)


def test_the_sync_keeper_sends_the_renewals_of_a_beat_at_once(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    keeper = LeaseKeeper(app.store, app.clock, app.config.lease_duration)
    attempts = [Attempt.start(app, keeper, f"w{i}") for i in range(3)]
    keeper._store = SlowStore(app, len(attempts))  # type: ignore[assignment]
    clock.advance(timedelta(seconds=20))

    keeper.beat()

    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    expiries = {a.stored().lease.expires_at for a in attempts}  # type: ignore[union-attr]
    assert expiries == {clock.now() + app.config.lease_duration}
