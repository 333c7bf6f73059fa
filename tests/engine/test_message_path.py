"""The per-message path stepped by hand: each race is put at an exact point of the timeline
ClaimHinted | ReadRun -> Write(claim) -> Begin -> CallHandler -> End -> Write(outcome)
[-> follow-up]."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from runlane_sqs import RateLimit, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.errors import ConflictError, NoFreeSlot, StorageError, StorageUnavailable
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import EventType, Run, Slot, Wait, WaitKind
from runlane_sqs.core.rates import CLAIM_LEAD
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.core.slots import queue_scope
from runlane_sqs.core.wakeup import ClaimHint, Wakeup
from runlane_sqs.engine.context import WaitRequested
from runlane_sqs.engine.driver import (
    Begin,
    CallHandler,
    ClaimHinted,
    Disposition,
    DriverCall,
    End,
    Hold,
    Pause,
    Publish,
    ReadRun,
    Write,
    drive,
)
from runlane_sqs.engine.finishing import Finish
from runlane_sqs.engine.message import MessagePath, always
from runlane_sqs.engine.rates import Reservation
from runlane_sqs.engine.resuming import Recheck
from runlane_sqs.engine.slots import RecheckSlot, WakeWaiters
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.executor import LeaseBook, begin_attempt
from runlane_sqs.testing import ManualClock, in_memory_app

R = TypeVar("R")
MINUTE = timedelta(minutes=1)
TIMELINE = ["ReadRun", "Write", "Begin", "CallHandler", "End", "Write"]
TOKEN_WAIT = Wait(WaitKind.TOKEN, "token:t1#1", "t1")


class Boom(Exception):
    pass


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    app = in_memory_app(clock=clock)

    @app.task(name="echo")
    def echo(ctx: TaskContext, payload: Any) -> Any:
        return {"echo": payload}

    @app.task(name="boom", retry=RetryPolicy(max_attempts=3, delay=60, backoff="fixed"))
    def boom(ctx: TaskContext, payload: Any) -> Any:
        raise Boom("kaput")

    @app.task(name="nap")
    def nap(ctx: TaskContext, payload: Any) -> Any:
        return ctx.release(delay=30)

    @app.task(name="rated", rate_limits=[RateLimit(10, per=1)])
    def rated(ctx: TaskContext, payload: Any) -> Any:
        return {"entered": clock.now().isoformat()}

    return app


def body(run: Run, environment: str | None = None) -> str:
    return Wakeup(environment or run.environment, run.id, run.queue, run.created_at).to_json()


class Path:
    """One message's path stepped by hand; ``answer`` performs a call as the sync driver
    would, against the in-memory store (follow-ups are only recorded)."""

    def __init__(
        self,
        app: Runlane,
        text: str,
        tasks: TaskRegistry | None = None,
        receives: int = 1,
        may_start: Callable[[], bool] = always,
    ) -> None:
        self.app = app
        self.leases = LeaseBook(app.clock, app.config.lease_duration)
        path = self.path = MessagePath(
            tasks=tasks or app.tasks,
            clock=app.clock,
            config=app.config,
            worker_id="w1",
            may_start=may_start,
        )
        self.message = ReceivedWakeup(
            queue="default", body=text, receipt="r", message_id="m", receive_count=receives
        )
        self.handling = path.handle(self.message)
        self.calls: list[DriverCall] = []
        self.pending: DriverCall | None = None
        self.disposition: Disposition | None = None
        self._take(lambda: next(self.handling))

    def _take(self, resume: Callable[[], DriverCall]) -> Any:
        assert self.disposition is None, "the path already ended"
        try:
            self.pending = resume()
        except StopIteration as stop:
            self.pending, self.disposition = None, stop.value
        else:
            self.calls.append(self.pending)
        return self.pending

    def send(self, reply: object) -> Any:
        return self._take(lambda: self.handling.send(reply))

    def throw(self, exc: BaseException) -> Any:
        return self._take(lambda: self.handling.throw(exc))

    def perform(self, call: DriverCall) -> Any:
        store = self.app.store
        performers: dict[type, Callable[[Any], Any]] = {
            ReadRun: lambda r: store.get_run(r.run_id),
            ClaimHinted: lambda r: store.claim_hinted(r.claim),
            Write: lambda r: store.apply(r.transition),
            Begin: lambda r: begin_attempt(r, self.app.engine, self.leases, "w1"),
            CallHandler: lambda r: r.task.fn(r.ctx, r.payload),
            End: lambda r: self.leases.untrack(r.run_id, r.token),
            Pause: lambda r: self.app.engine.pause(r.delay.total_seconds()),
            Reservation: self.app.engine.serve,
        }
        perform = performers.get(type(call))
        return perform(call) if perform else None

    def answer(self, call: DriverCall | None = None) -> Any:
        """Perform ``call`` (default: the pending one) and send its result or error."""
        call = call or self.pending
        assert call is not None, f"the path ended {self.disposition}"
        try:
            reply = self.perform(call)
        except BaseException as exc:
            return self.throw(exc)
        return self.send(reply)

    def until(self, kind: type[R]) -> R:
        while not isinstance(self.pending, kind):
            self.answer()
        return self.pending

    def outcome(self, *handler_reply: object) -> Write:
        """The outcome write after the handler (called for real unless a reply is given)."""
        call = self.until(CallHandler)
        if handler_reply:
            self.send(handler_reply[0])
        else:
            self.answer(call)
        write = self.answer()  # End
        assert isinstance(write, Write)
        return write

    def finish(self) -> Disposition:
        while self.pending is not None:
            self.answer()
        assert self.disposition is not None
        return self.disposition

    def kinds(self) -> list[str]:
        return [type(r).__name__ for r in self.calls]


def claimed_unanswered(app: Runlane) -> tuple[Run, Path, Run]:
    """A run whose claim (after a read) is stored, its answer not yet sent to the path."""
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    claim = path.answer()  # the read
    assert isinstance(claim, Write)
    return run, path, app.store.apply(claim.transition)


def take_over(app: Runlane, clock: ManualClock, run_id: str) -> Run:
    """The attempt's lease expires, maintenance requeues the run and w2 claims it."""
    clock.advance(app.config.lease_duration + timedelta(seconds=1))
    expired = expire_lease(stored(app, run_id), now=clock.now())
    assert isinstance(expired, Transition)
    claim = machine.claim_lease(
        app.store.apply(expired), now=clock.now(), owner="w2", token="t2", duration=MINUTE
    )
    assert isinstance(claim, Transition)
    return app.store.apply(claim)


def stored(app: Runlane, run_id: str) -> Run:
    run = app.store.get_run(run_id)
    assert run is not None
    return run


def test_plain_timeline_claims_on_the_hint_runs_the_handler_and_records_success(
    app: Runlane,
) -> None:
    run = app.trigger("echo", {"n": 1})
    [message] = app.transport.receive("default", 10, 0)
    path = MessagePath(tasks=app.tasks, clock=app.clock, config=app.config, worker_id="w1")
    handling = path.handle(message)
    leases = LeaseBook(app.clock, app.config.lease_duration)

    claim = next(handling)  # no read: one write conditioned on the trigger's hint
    assert isinstance(claim, ClaimHinted)
    assert (claim.claim.run_id, claim.claim.hint, claim.claim.owner) == (
        run.id,
        ClaimHint(seq=1, attempt=0, task="echo", review_at=run.review_at),
        "w1",
    )
    assert run.review_at == run.created_at + app.config.lease_duration
    claimed = app.store.claim_hinted(claim.claim)
    assert (claimed.status, claimed.attempt) == (RunStatus.RUNNING, 1)
    assert claimed.lease is not None and claimed.lease.owner == "w1"
    begin = handling.send(claimed)
    assert begin == Begin(claimed, claimed.lease.token)
    call = handling.send(begin_attempt(begin, app.engine, leases, "w1"))
    assert isinstance(call, CallHandler)
    assert (call.task.name, call.payload, call.ctx.attempt) == ("echo", {"n": 1}, 1)
    end = End(run.id, claimed.lease.token)
    assert handling.send(call.task.fn(call.ctx, call.payload)) == end
    outcome = handling.send(leases.untrack(run.id, end.token))
    assert isinstance(outcome, Write)
    assert outcome.transition.fence == claimed.lease.token
    assert outcome.transition.after.status is RunStatus.SUCCEEDED
    with pytest.raises(StopIteration) as done:  # no keys, not watched: no follow-up
        handling.send(app.store.apply(outcome.transition))

    assert done.value.value is Disposition.EXECUTED
    final = stored(app, run.id)
    assert (final.status, final.result) == (RunStatus.SUCCEEDED, {"echo": {"n": 1}})
    events = [e.type for e in app.store.get_events(run.id)]
    assert events == [EventType.TRIGGERED, EventType.STARTED, EventType.SUCCEEDED]


def test_a_wakeup_without_a_hint_reads_the_run_then_claims_it(app: Runlane) -> None:
    run = app.trigger("echo", 1)
    path = Path(app, body(run))  # written by hand: no hint

    assert path.finish() is Disposition.EXECUTED
    assert path.kinds() == TIMELINE
    assert isinstance(path.calls[1], Write)
    assert path.calls[1].transition.before.seq == 1


def test_a_hint_gone_stale_is_decided_on_the_run_the_refusal_returns(app: Runlane) -> None:
    """An old wakeup of a run that failed since: its retry is claimed without a read."""
    run = app.trigger("boom", None)
    [first] = app.transport.receive("default", 10, 0)
    assert Path(app, first.body).finish() is Disposition.EXECUTED  # attempt 1 fails
    app.clock.advance(timedelta(seconds=61))  # the retry is due

    again = Path(app, first.body)  # the trigger's wakeup again, its hint at seq 1

    assert again.finish() is Disposition.EXECUTED
    assert again.kinds() == ["ClaimHinted", *TIMELINE[1:], "Publish"]  # fails again
    assert stored(app, run.id).attempt == 2


def test_a_hint_of_a_run_another_worker_holds_is_skipped_after_one_refused_write(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger("echo", None)
    [message] = app.transport.receive("default", 10, 0)
    rival = machine.claim_lease(run, now=clock.now(), owner="w2", token="t2", duration=MINUTE)
    assert isinstance(rival, Transition)
    held = app.store.apply(rival)

    path = Path(app, message.body)

    assert path.finish() is Disposition.SKIPPED
    assert path.kinds() == ["ClaimHinted"]
    assert stored(app, run.id) == held


def test_a_hint_naming_a_task_this_worker_lacks_reads_the_run(app: Runlane) -> None:
    run = app.trigger("echo", None)
    [message] = app.transport.receive("default", 10, 0)

    path = Path(app, message.body, tasks=TaskRegistry())

    assert path.finish() is Disposition.DEFERRED  # unknown task: left for another worker
    assert path.kinds() == ["ReadRun"]
    assert stored(app, run.id).status is RunStatus.QUEUED


def test_sync_drive_with_a_table_of_lambdas_matches_stepping_by_hand(app: Runlane) -> None:
    by_hand = Path(app, body(app.trigger("echo", 1)))
    assert by_hand.finish() is Disposition.EXECUTED
    run = app.trigger("echo", 2)
    leases = LeaseBook(app.clock, app.config.lease_duration)
    seen: list[str] = []
    table: dict[type, Callable[[Any], Any]] = {
        ReadRun: lambda r: app.store.get_run(r.run_id),
        Write: lambda r: app.store.apply(r.transition),
        Begin: lambda r: begin_attempt(r, app.engine, leases, "w1"),
        CallHandler: lambda r: r.task.fn(r.ctx, r.payload),
        End: lambda r: leases.untrack(r.run_id, r.token),
    }

    def perform(call: DriverCall) -> Any:
        seen.append(type(call).__name__)
        return table[type(call)](call)

    path = MessagePath(tasks=app.tasks, clock=app.clock, config=app.config, worker_id="w1")
    message = ReceivedWakeup(queue="default", body=body(run), receipt="r", message_id="m")

    assert drive(path.handle(message), perform) is Disposition.EXECUTED
    assert seen == by_hand.kinds() == TIMELINE
    assert stored(app, run.id).result == {"echo": 2}


def test_claim_lost_to_another_worker_is_skipped_without_running_the_handler(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    claim = path.send(stored(app, run.id))  # read before the other worker's claim lands
    rival = machine.claim_lease(run, now=clock.now(), owner="w2", token="t2", duration=MINUTE)
    assert isinstance(rival, Transition)
    app.store.apply(rival)

    assert path.answer(claim) is None  # the store refuses: ConflictError thrown in

    assert (path.disposition, path.kinds()) == (Disposition.SKIPPED, ["ReadRun", "Write"])
    lease = stored(app, run.id).lease
    assert lease is not None and lease.owner == "w2"
    assert any("claim_lost" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("late", [0.5, 1.0], ids=["half-the-lease", "past-the-lease"])
def test_claim_that_comes_back_late_gives_the_run_back_unrun(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture, late: float
) -> None:
    run, path, claimed = claimed_unanswered(app)
    clock.advance(app.config.lease_duration * late)  # paused, or retried through an outage

    withdraw = path.send(claimed)

    assert isinstance(withdraw, Write)
    assert claimed.lease is not None and withdraw.transition.fence == claimed.lease.token
    assert path.answer() == Publish(stored(app, run.id), timedelta(0))
    assert path.finish() is Disposition.SKIPPED
    assert "CallHandler" not in path.kinds() and "Begin" not in path.kinds()
    now = stored(app, run.id)
    assert (now.status, now.lease, now.due_at, now.lease_losses) == (
        RunStatus.QUEUED,
        None,
        clock.now(),
        0,
    )
    expired = app.store.get_events(run.id)[-1]
    assert (expired.type, expired.data) == (
        EventType.LEASE_EXPIRED,
        {"worker": "w1", "before_start": True, "reason": "late"},
    )
    assert "giving the run back without starting attempt 1" in caplog.text


def test_claim_that_comes_back_with_more_than_half_its_lease_left_runs(
    app: Runlane, clock: ManualClock
) -> None:
    run, path, claimed = claimed_unanswered(app)
    clock.advance(app.config.lease_duration / 2 - timedelta(milliseconds=1))

    assert isinstance(path.send(claimed), Begin)
    assert path.finish() is Disposition.EXECUTED
    assert stored(app, run.id).status is RunStatus.SUCCEEDED


def test_a_rated_handler_is_not_entered_before_its_reserved_start(
    app: Runlane, clock: ManualClock
) -> None:
    """A rate-limited run reserves its start a lead ahead of now and is claimed at once;
    the claim's write comes back at once, and the attempt's thread waits for the start
    (a pause that ends early by the clock is followed by another): the handler is entered
    at it, the time its ``started`` event records."""
    t0 = clock.now()
    run = app.trigger("rated", None)
    path = Path(app, body(run))
    path.until(Write)
    assert path.kinds() == ["ReadRun", "Reservation", "Write"]

    assert path.answer() == Pause(CLAIM_LEAD)  # the claim is stored, the handler waits
    clock.advance(CLAIM_LEAD - timedelta(milliseconds=10))  # the pause ends early
    assert path.send(None) == Pause(timedelta(milliseconds=10))
    clock.advance(timedelta(milliseconds=10))
    assert isinstance(path.send(None), Begin)

    assert path.finish() is Disposition.EXECUTED
    assert stored(app, run.id).result == {"entered": (t0 + CLAIM_LEAD).isoformat()}
    started = [e.at for e in app.store.get_events(run.id) if e.type is EventType.STARTED]
    assert started == [t0 + CLAIM_LEAD]


def test_a_rated_claim_back_past_the_grace_is_given_back_and_entered_at_a_new_start(
    app: Runlane, clock: ManualClock
) -> None:
    """The claim's write takes 200 ms: the start it was made for (100 ms ahead) is more than
    the 50 ms grace past, so the handler is not entered. The worker's lead grows to twice
    that claim (400 ms); the run reserves again that lead ahead, and the claim is given
    back in one write, the run asleep until that start and its message held until the lead
    before it; handled again then, the run is claimed without reserving again and its
    handler entered at that start."""
    t0 = clock.now()
    run = app.trigger("rated", None)
    path = Path(app, body(run))
    path.until(Write)
    clock.advance(timedelta(milliseconds=200))  # the claim's write takes this long

    assert isinstance(path.answer(), Reservation)  # no pause: reserve again
    lead = timedelta(milliseconds=400)
    assert path.path.claim_lead.lead == lead
    give_back = path.answer()
    assert isinstance(give_back, Write)
    claimed = give_back.transition.before
    assert claimed.lease is not None and give_back.transition.fence == claimed.lease.token
    new_start = t0 + timedelta(milliseconds=200) + lead
    assert path.answer() == Hold(path.message, new_start - lead)
    assert path.send(True) is None and path.disposition is Disposition.HELD
    assert "Begin" not in path.kinds() and "CallHandler" not in path.kinds()
    asleep = stored(app, run.id)
    assert (asleep.status, asleep.lease, asleep.attempt) == (RunStatus.QUEUED, None, 1)
    assert (asleep.rate_start, asleep.due_at) == (new_start, new_start - lead)
    history = app.store.get_events(run.id)[1:]
    assert [(e.type, e.data.get("reason")) for e in history] == [
        (EventType.STARTED, None),
        (EventType.LEASE_EXPIRED, "rate"),  # with before_start: the handler never ran
        (EventType.WAITING_FOR_RATE, None),
    ]
    assert history[1].data["before_start"] is True

    clock.set(new_start - lead)
    again = Path(app, body(run))  # the held message, handed out when the run is due
    assert again.until(Pause) == Pause(lead)  # claimed, whatever its lead; waits for its start
    assert again.finish() is Disposition.EXECUTED
    assert again.kinds()[:3] == ["ReadRun", "Write", "Pause"]  # no second reservation
    assert stored(app, run.id).result == {"entered": new_start.isoformat()}
    started = [e.at for e in app.store.get_events(run.id) if e.type is EventType.STARTED]
    assert started == [t0 + CLAIM_LEAD, new_start]


def test_late_claim_that_maintenance_recovered_first_is_skipped_unrun(
    app: Runlane, clock: ManualClock
) -> None:
    run, path, claimed = claimed_unanswered(app)
    taken = take_over(app, clock, run.id)  # expired, requeued, claimed by w2

    path.send(claimed)
    path.answer()  # the withdrawal is refused: the run moved on

    assert (path.disposition, path.kinds()) == (
        Disposition.SKIPPED,
        ["ReadRun", "Write", "Write"],
    )
    assert stored(app, run.id) == taken


def test_lease_lost_during_the_handler_writes_nothing(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)
    take_over(app, clock, run.id)  # the handler runs past its lease

    end = path.send({"late": True})
    latest, _, _ = path.leases.untrack(end.run_id, end.token) or (run, False, None)

    assert path.send((latest, True, None)) is None
    assert (path.disposition, path.kinds()) == (Disposition.EXECUTED, TIMELINE[:-1])
    now = stored(app, run.id)
    assert now.status is RunStatus.RUNNING and now.lease is not None
    assert (now.lease.owner, now.attempt, now.result) == ("w2", 2, None)
    assert "outcome discarded" in caplog.text


def test_cancel_request_landing_before_the_outcome_is_decided_again(app: Runlane) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)
    app.runs.cancel(run.id, reason="stop")  # lands while the handler runs

    first = path.outcome("done")  # decided on the run the attempt last knew
    assert first.transition.after.status is RunStatus.SUCCEEDED
    second = path.answer()  # refused: ConflictError whose current keeps our lease token

    assert isinstance(second, Write)
    assert second.transition.before.status is RunStatus.CANCEL_REQUESTED
    assert second.transition.after.status is RunStatus.CANCELLED
    assert [(e.type, e.data) for e in second.transition.events] == [
        (EventType.CANCELLED, {"after": "succeeded"})
    ]
    assert path.finish() is Disposition.EXECUTED
    assert path.kinds() == [*TIMELINE, "Write"]
    assert stored(app, run.id).status is RunStatus.CANCELLED


def test_conflict_under_another_lease_token_discards_the_outcome(
    app: Runlane, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)
    taken = take_over(app, clock, run.id)  # the keeper did not notice: End says not lost
    path.outcome("done")

    assert path.throw(ConflictError(run.id, taken)) is None

    assert (path.disposition, path.kinds()) == (Disposition.EXECUTED, TIMELINE)
    assert stored(app, run.id) == taken
    assert "lease was lost before the outcome was written" in caplog.text


@pytest.mark.parametrize("at", [ReadRun, Write, End], ids=["read", "claim", "outcome"])
def test_storage_unavailable_defers_the_message(
    app: Runlane, at: type, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(at)
    if at is End:
        path.answer()  # the outcome write is pending

    assert path.throw(StorageUnavailable("throttled")) is None

    assert path.disposition is Disposition.DEFERRED
    assert stored(app, run.id).status is (RunStatus.QUEUED if at is not End else RunStatus.RUNNING)
    assert "storage unavailable, leaving wakeup for redelivery" in caplog.text


@pytest.mark.parametrize("refused_again", [False, True])
def test_outcome_refused_by_storage_fails_the_run_with_a_small_failure(
    app: Runlane, refused_again: bool, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.outcome("x" * 100)

    refused = path.throw(StorageError("Item size has exceeded the maximum allowed size"))

    assert isinstance(refused, Write)
    failure = refused.transition.after.failure
    assert refused.transition.after.status is RunStatus.FAILED and failure is not None
    assert (failure.type, failure.retryable) == ("runlane_sqs.errors.StorageError", False)
    assert "maximum allowed size" in failure.message
    if refused_again:  # returns without raising; nothing recorded, left to lease expiry
        assert path.throw(StorageError("too large again")) is None
        assert "could not record the failure either" in caplog.text
    assert (path.finish(), path.kinds()) == (Disposition.EXECUTED, [*TIMELINE, "Write"])
    final = stored(app, run.id).status
    assert final is (RunStatus.RUNNING if refused_again else RunStatus.FAILED)


@pytest.mark.parametrize(
    ("task", "status", "failures", "delay"),
    [
        ("boom", RunStatus.RETRYING, 1, MINUTE),
        ("nap", RunStatus.RELEASED, 0, timedelta(seconds=30)),
    ],
    ids=["retry-per-policy", "ctx.release"],
)
def test_handler_due_again_soon_has_its_wakeup_published(
    app: Runlane, clock: ManualClock, task: str, status: RunStatus, failures: int, delay: timedelta
) -> None:
    run = app.trigger(task, None)
    path = Path(app, body(run))

    write = path.outcome()  # Boom raised, or a real ctx.release(delay=30) (WaitRequested)

    after = write.transition.after
    assert (after.status, after.failures, after.due_at) == (status, failures, clock.now() + delay)
    if task == "nap":
        assert after.failure is None and after.waiting is not None
        assert [e.type for e in write.transition.events] == [EventType.RELEASED]
    else:
        assert after.failure is not None and after.failure.type.endswith("Boom")
        assert (after.failure.message, after.failure.retryable) == ("kaput", True)
    assert path.answer() == Publish(stored(app, run.id), delay)
    assert path.finish() is Disposition.EXECUTED


@pytest.mark.parametrize(
    "policy",
    [RetryPolicy(max_attempts=1), RetryPolicy(max_attempts=5, non_retryable=(Boom,))],
    ids=["last-attempt", "non-retryable"],
)
def test_failed_run_with_an_idempotency_key_is_finished(app: Runlane, policy: RetryPolicy) -> None:
    @app.task(name="once", retry=policy)
    def once(ctx: TaskContext, payload: Any) -> Any:
        raise Boom("no")

    path = Path(app, body(app.trigger("once", None, idempotency_key="k1")))
    assert path.outcome().transition.after.status is RunStatus.FAILED

    finish = path.answer()

    assert isinstance(finish, Finish) and finish.run.status is RunStatus.FAILED
    assert finish.run.idempotency_key == "k1"
    assert path.finish() is Disposition.EXECUTED


def test_run_watched_during_the_attempt_is_finished(app: Runlane) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)
    app.store.watch_run(run.id)  # another run starts waiting for this one

    assert path.finish() is Disposition.EXECUTED
    assert path.kinds() == [*TIMELINE, "Finish"]
    finish = path.calls[-1]
    assert isinstance(finish, Finish) and finish.run.watched


@pytest.mark.parametrize("key", [None, "k1"], ids=["plain", "idempotency-key"])
@pytest.mark.parametrize("task", ["echo", "slow"], ids=["success", "retry-in-an-hour"])
def test_outcomes_left_to_storage_and_maintenance_ask_no_follow_up(
    app: Runlane, task: str, key: str | None
) -> None:
    @app.task(name="slow", retry=RetryPolicy(max_attempts=2, delay=3600, backoff="fixed"))
    def slow(ctx: TaskContext, payload: Any) -> Any:
        raise Boom("later")

    run = app.trigger(task, None, idempotency_key=key)
    path = Path(app, body(run))

    assert path.finish() is Disposition.EXECUTED
    assert path.kinds() == TIMELINE
    final = stored(app, run.id)
    assert final.status is (RunStatus.SUCCEEDED if task == "echo" else RunStatus.RETRYING)
    assert final.wake_at is None  # a retry past SQS's 15 minutes: maintenance publishes it


def test_token_wait_thrown_into_the_handler_releases_and_rechecks(app: Runlane) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)

    write = path.answer(path.throw(WaitRequested(TOKEN_WAIT)))

    assert isinstance(write, Write) and write.transition.after.status is RunStatus.RELEASED
    recheck = path.answer()
    assert isinstance(recheck, Recheck) and recheck.run == stored(app, run.id)
    assert recheck.run.waiting == TOKEN_WAIT
    assert path.finish() is Disposition.EXECUTED


def test_closing_the_path_at_the_handler_records_nothing(
    app: Runlane, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)

    path.handling.close()  # GeneratorExit is not a handler failure: no End, no Write

    with pytest.raises(StopIteration):
        next(path.handling)
    assert stored(app, run.id).status is RunStatus.RUNNING  # left to lease expiry
    assert [e.type for e in app.store.get_events(run.id)][-1] is EventType.STARTED
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("text", ["garbage", "{}", '{"version": 1}', "[" * 3000 + "]" * 3000])
def test_hints_naming_nothing_here_are_skipped_before_any_request(app: Runlane, text: str) -> None:
    path = Path(app, text)

    assert (path.disposition, path.calls) == (Disposition.SKIPPED, [])


def test_a_wakeup_of_another_environment_is_returned_before_any_request_with_one_warning_per_queue(
    app: Runlane, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = MessagePath(tasks=app.tasks, clock=app.clock, config=app.config, worker_id="w1")

    def handle(environment: str, queue: str = "default") -> Disposition:
        message = ReceivedWakeup(queue, body(run, environment), "r", "m")
        return drive(path.handle(message), lambda call: pytest.fail(f"asked {call}"))

    with caplog.at_level(logging.INFO, logger="runlane_sqs"):
        dispositions = [handle("staging"), handle("staging"), handle("qa"), handle("qa", "emails")]

    assert dispositions == [Disposition.RETURNED] * 4  # never SKIPPED: that deletes it
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.split(";")[0] for w in warnings] == [
        "queue runlane-test-default receives wakeups of environment 'staging'",
        "queue runlane-test-default receives wakeups of environment 'qa'",
        "queue runlane-test-emails receives wakeups of environment 'qa'",
    ]
    assert "this worker's environment is 'test'" in warnings[0]
    assert "its own queues" in warnings[0]
    returned = [r for r in caplog.records if r.getMessage().startswith("returning wakeup")]
    assert len(returned) == 4
    assert stored(app, run.id).seq == run.seq  # nothing written


def test_unknown_or_finished_run_is_skipped_after_the_read(app: Runlane) -> None:
    run = app.trigger("echo", None)
    unknown = Path(app, body(run))
    assert unknown.send(None) is None  # ReadRun answered: no such run
    assert Path(app, body(run)).finish() is Disposition.EXECUTED

    duplicate = Path(app, body(run))

    assert (unknown.disposition, unknown.kinds()) == (Disposition.SKIPPED, ["ReadRun"])
    assert (duplicate.finish(), duplicate.kinds()) == (Disposition.SKIPPED, ["ReadRun"])


def test_run_of_an_unregistered_task_is_deferred_until_its_third_receive(
    app: Runlane, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run), tasks=TaskRegistry(), receives=2)

    assert (path.finish(), path.kinds()) == (Disposition.DEFERRED, ["ReadRun"])
    assert stored(app, run.id).status is RunStatus.QUEUED
    assert "does not register" in caplog.text


def test_run_of_an_unregistered_task_is_parked_at_its_third_receive(
    app: Runlane, caplog: pytest.LogCaptureFixture
) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run), tasks=TaskRegistry(), receives=3)

    assert (path.finish(), path.kinds()) == (Disposition.SKIPPED, ["ReadRun", "Write"])
    parked = stored(app, run.id)
    assert (parked.status, parked.parked_from) == (RunStatus.PARKED, RunStatus.QUEUED)
    assert "parked run" in caplog.text and "runs unpark" in caplog.text


def test_a_park_that_loses_to_a_claim_changes_nothing(app: Runlane) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run), tasks=TaskRegistry(), receives=3)
    path.answer()  # ReadRun: the park is decided on the queued run
    claim_elsewhere = Path(app, body(run))
    claim_elsewhere.until(Begin)  # another worker claimed the run meanwhile

    path.answer()  # the park's conditional write is refused

    assert path.disposition is Disposition.SKIPPED
    assert stored(app, run.id).status is RunStatus.RUNNING


def test_storage_unavailable_in_a_follow_up_keeps_the_attempt_executed(app: Runlane) -> None:
    run = app.trigger("echo", None)
    path = Path(app, body(run))
    path.until(CallHandler)
    path.answer(path.throw(WaitRequested(TOKEN_WAIT)))  # End, then the release write
    assert isinstance(path.answer(), Recheck)

    path.throw(StorageUnavailable("throttled"))

    assert stored(app, run.id).status is RunStatus.RELEASED
    assert path.disposition is Disposition.EXECUTED


def limited_app(clock: ManualClock) -> Runlane:
    app = in_memory_app(clock=clock)

    @app.task(name="billing.sync", queue=app.queue("billing", concurrency_limit=1))
    def sync(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


def test_a_limited_run_is_read_then_claimed_with_its_slot_and_its_end_wakes_a_waiter(
    clock: ManualClock,
) -> None:
    """No hinted claim (the claim takes a slot): read, claim + slot, run, outcome + free,
    then one request to wake the oldest run waiting for the freed slot."""
    app = limited_app(clock)
    run = app.trigger("billing.sync", 1)
    path = Path(app, app.transport.receive("billing", 1, 0)[0].body)
    assert isinstance(path.pending, ReadRun)
    claim = path.answer()
    assert isinstance(claim, Write) and claim.transition.after.slots == (
        Slot(queue_scope("billing"), 1),
    )
    write = path.outcome()
    assert write.transition.after.status is RunStatus.SUCCEEDED
    wake = path.answer()
    assert isinstance(wake, WakeWaiters) and wake.scopes == (queue_scope("billing"),)
    assert path.finish() is Disposition.EXECUTED
    assert stored(app, run.id).slots == ()


def test_a_claim_that_finds_no_free_slot_waits_checks_again_and_acknowledges(
    clock: ManualClock,
) -> None:
    app = limited_app(clock)
    run = app.trigger("billing.sync", 1)
    path = Path(app, body(run))
    claim = path.answer()
    assert isinstance(claim, Write)
    wait = path.throw(NoFreeSlot(run.id, queue_scope("billing"), 1, 1))
    assert isinstance(wait, Write)
    assert wait.transition.after.slot_wait == queue_scope("billing")
    assert wait.transition.after.attempt == 0
    recheck = path.answer()
    assert isinstance(recheck, RecheckSlot) and recheck.run.slot_wait == queue_scope("billing")
    path.send(None)
    assert path.disposition is Disposition.SKIPPED  # the wakeup is deleted
    assert path.kinds() == ["ReadRun", "Write", "Write", "RecheckSlot"]


def test_a_run_that_stopped_waiting_before_its_wait_was_written_is_left_alone(
    clock: ManualClock,
) -> None:
    """Another worker claimed the run between the refused claim and the wait's write: the
    wait is refused and nothing else happens."""
    app = limited_app(clock)
    run = app.trigger("billing.sync", 1)
    path = Path(app, body(run))
    path.answer()  # the read; the claim is pending
    app.engine.store.apply(
        machine.request_cancel(stored(app, run.id), now=clock.now(), actor="op", reason="")
    )
    path.throw(NoFreeSlot(run.id, queue_scope("billing"), 1, 1))
    assert path.finish() is Disposition.SKIPPED
    assert path.kinds() == ["ReadRun", "Write", "Write"]
    assert stored(app, run.id).status is RunStatus.CANCELLED


def test_a_run_claimed_after_the_time_to_start_ran_out_is_given_back_unrun(
    app: Runlane,
) -> None:
    """A Lambda invocation's safety margin passed while the claim was written."""
    run = app.trigger("echo", None)
    path = Path(app, body(run), may_start=lambda: False)
    path.answer()  # the read; the claim is pending
    withdraw = path.answer()
    assert isinstance(withdraw, Write)
    assert withdraw.transition.events[-1].data["reason"] == "deadline"
    assert path.finish() is Disposition.SKIPPED
    assert "CallHandler" not in path.kinds()
    assert stored(app, run.id).status is RunStatus.QUEUED


def test_an_attempt_begun_as_the_time_to_start_ran_out_is_cancelled_at_once(
    app: Runlane,
) -> None:
    run = app.trigger("echo", None)
    allowed = [True]
    path = Path(app, body(run), may_start=lambda: allowed[0])
    path.answer()  # the read
    begin = path.answer()  # the claim, checked while there was time
    assert isinstance(begin, Begin)
    allowed[0] = False  # the deadline timer fires before the attempt is tracked
    call = path.answer()
    assert isinstance(call, CallHandler) and call.ctx.cancellation.is_set()


def test_a_wakeup_a_moment_before_its_run_is_due_by_the_workers_clock_is_kept_until_then() -> None:
    """The producer's clock runs 30 ms ahead of the worker's: the trigger's wakeup finds its
    run not due yet. The worker keeps the message until the run is due, instead of
    dropping the run's only wakeup and leaving it to maintenance's republish, minutes
    later (simulation: `make simulate SEED=31 ARGS="--runs 300"`, a run first executed
    20 minutes after its trigger)."""
    clock = ManualClock()
    app = in_memory_app(clock=clock)
    app.task(lambda ctx, payload: payload, name="echo")
    run = app.trigger("echo", 1)
    [message] = app.transport.receive("default", 10, 0)
    behind = ManualClock(clock.now() - timedelta(milliseconds=30))
    path = MessagePath(tasks=app.tasks, clock=behind, config=app.config, worker_id="w1")
    handling = path.handle(message)
    claim = next(handling)
    assert isinstance(claim, ClaimHinted)
    with pytest.raises(ConflictError) as refused:  # not due, by the worker's clock
        app.store.claim_hinted(claim.claim)

    assert handling.throw(refused.value) == Hold(message, run.due_at)
    with pytest.raises(StopIteration) as done:
        handling.send(True)
    assert done.value.value is Disposition.HELD
