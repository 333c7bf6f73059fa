"""Attempts as operators see them, derived from histories that the state
machine itself produced: every event list below is the output of real transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.core import machine, recovery, waits
from runlane_sqs.core.attempts import Attempt, attempts_from
from runlane_sqs.core.machine import RepublishPolicy, Transition
from runlane_sqs.core.model import EventType, Failure, Run, RunEvent, RunStatus, Wait, WaitKind
from runlane_sqs.core.retry import RetryDecision, RetryPolicy

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
RUN_ID = "0123456789abcdef0123456789abcdef"
FIRST = Failure(type="app.Flaky", message="first", traceback="Traceback 1")
SECOND = Failure(type="app.Flaky", message="second", traceback="Traceback 2", retryable=True)
FINAL = Failure(type="app.Invalid", message="bad input", retryable=False)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class History:
    """A run driven through the state machine, keeping every event it produced."""

    def __init__(self, timeout: timedelta | None = None) -> None:
        run, event = machine.new_run(
            run_id=RUN_ID,
            environment="test",
            task="work",
            queue="default",
            payload={"n": 1},
            now=T0,
        )
        self.run: Run = run
        self.events: list[RunEvent] = [event]
        self.token = ""
        self.timeout = timeout

    def apply(self, decision: object) -> None:
        assert isinstance(decision, Transition), decision
        self.events.extend(decision.events)
        self.run = decision.after

    def start(self, worker: str, now: datetime) -> None:
        self.token = f"tok-{worker}-{self.run.attempt + 1}"
        self.apply(
            machine.claim_lease(
                self.run,
                now=now,
                owner=worker,
                token=self.token,
                duration=LEASE,
                timeout=self.timeout,
            )
        )

    def fail(self, failure: Failure, now: datetime, retry_at: datetime | None) -> None:
        self.apply(
            machine.record_failure(
                self.run,
                token=self.token,
                failure=failure,
                decision=RetryDecision(retry_at),
                now=now,
            )
        )

    def succeed(self, now: datetime, result: object = "ok") -> None:
        self.apply(machine.record_success(self.run, token=self.token, result=result, now=now))

    def release_until(self, now: datetime, until: datetime) -> None:
        wait = Wait(WaitKind.TIME, "time:0", until=until)
        self.apply(
            waits.release(
                self.run, token=self.token, wait=wait, now=now, republish=RepublishPolicy()
            )
        )


# success after failures ---------------------------------------------------------------


def test_two_failures_then_a_success_are_three_attempts_with_their_failures() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.fail(FIRST, at(2), retry_at=at(10))
    history.start("worker-b", at(10))
    history.fail(SECOND, at(12), retry_at=at(20))
    history.start("worker-a", at(20))
    history.succeed(at(25))
    assert history.run.status is RunStatus.SUCCEEDED

    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=at(2), outcome="failed", failure=FIRST),
        Attempt(2, "worker-b", at(10), ended_at=at(12), outcome="failed", failure=SECOND),
        Attempt(3, "worker-a", at(20), ended_at=at(25), outcome="succeeded", failure=None),
    ]


def test_attempts_come_out_in_sequence_order_whatever_order_the_events_are_given_in() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.fail(FIRST, at(2), retry_at=at(3))
    history.start("worker-b", at(3))
    history.succeed(at(4))

    shuffled = list(reversed(history.events))
    attempts = attempts_from(shuffled)
    assert [(a.number, a.worker, a.outcome) for a in attempts] == [
        (1, "worker-a", "failed"),
        (2, "worker-b", "succeeded"),
    ]


def test_a_final_failure_ends_the_attempt_once_not_twice() -> None:
    """``attempt_failed`` then ``failed``: one attempt, ended by the first of the two."""
    history = History()
    history.start("worker-a", at(1))
    history.fail(FINAL, at(5), retry_at=None)
    assert history.run.status is RunStatus.FAILED
    assert [e.type for e in history.events][-2:] == [EventType.ATTEMPT_FAILED, EventType.FAILED]

    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=at(5), outcome="failed", failure=FINAL),
    ]


def test_a_failure_round_trips_through_json_in_the_attempt() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.fail(FINAL, at(5), retry_at=None)
    (attempt,) = attempts_from(history.events)
    assert attempt.to_json() == {
        "number": 1,
        "worker": "worker-a",
        "app_version": None,
        "started_at": at(1).isoformat(),
        "ended_at": at(5).isoformat(),
        "outcome": "failed",
        "failure": FINAL.to_json(),
    }


# releases -----------------------------------------------------------------------------


def test_a_release_then_a_success_are_two_attempts() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.release_until(at(2), until=at(60))
    assert history.run.status is RunStatus.RELEASED
    history.start("worker-b", at(60))
    history.succeed(at(61))

    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=at(2), outcome="released"),
        Attempt(2, "worker-b", at(60), ended_at=at(61), outcome="succeeded"),
    ]
    # a release is not a failure: the retry policy did not count it
    assert history.run.failures == 0


# lease expiry -------------------------------------------------------------------------


def test_an_expired_lease_ends_the_attempt_and_the_next_one_is_still_running() -> None:
    history = History()
    history.start("worker-a", at(1))
    expired_at = at(1) + LEASE + timedelta(seconds=1)
    history.apply(recovery.expire_lease(history.run, now=expired_at))
    assert history.run.status is RunStatus.QUEUED
    history.start("worker-b", expired_at + timedelta(seconds=1))
    assert history.run.lease is not None and history.run.lease.owner == "worker-b"

    attempts = attempts_from(history.events)
    assert attempts == [
        Attempt(1, "worker-a", at(1), ended_at=expired_at, outcome="lease_expired"),
        Attempt(2, "worker-b", expired_at + timedelta(seconds=1)),
    ]
    running = attempts[-1]
    assert (running.ended_at, running.outcome, running.failure) == (None, None, None)
    assert running.to_json()["ended_at"] is None


def test_too_many_lease_losses_fail_the_run_and_the_last_attempt_says_lease_expired() -> None:
    history = History()
    settings = recovery.RecoverySettings(max_lease_losses=2)
    now = at(0)
    for worker in ("worker-a", "worker-b"):
        now += timedelta(seconds=1)
        history.start(worker, now)
        now += LEASE + timedelta(seconds=1)
        history.apply(recovery.expire_lease(history.run, now=now, settings=settings))
    assert history.run.status is RunStatus.FAILED

    attempts = attempts_from(history.events)
    assert [(a.number, a.worker, a.outcome) for a in attempts] == [
        (1, "worker-a", "lease_expired"),
        (2, "worker-b", "lease_expired"),
    ]
    assert all(a.ended_at is not None for a in attempts)


def test_a_freshly_started_attempt_has_no_end() -> None:
    history = History()
    history.start("worker-a", at(3))
    assert attempts_from(history.events) == [Attempt(1, "worker-a", at(3))]


def test_a_run_that_never_started_has_no_attempts() -> None:
    history = History()
    assert attempts_from(history.events) == []
    assert attempts_from([]) == []


# timeouts -----------------------------------------------------------------------------


def test_a_timed_out_attempt_records_the_timeout_failure_and_a_retry_follows() -> None:
    history = History(timeout=timedelta(seconds=30))
    history.start("worker-a", at(1))
    deadline = history.run.deadline_at
    assert deadline == at(31)
    settings = recovery.RecoverySettings()
    policy = RetryPolicy(max_attempts=2, backoff="fixed", delay=0)
    history.apply(recovery.recover_lease(history.run, now=at(32), retry=policy, settings=settings))
    assert history.run.status is RunStatus.RETRYING
    history.start("worker-b", at(33))
    history.succeed(at(40))

    first, second = attempts_from(history.events)
    assert (first.number, first.worker, first.started_at) == (1, "worker-a", at(1))
    assert (first.ended_at, first.outcome) == (at(32), "timed_out")
    assert first.failure is not None
    assert first.failure.type == recovery.ATTEMPT_TIMEOUT
    assert first.failure.retryable is True
    assert second == Attempt(2, "worker-b", at(33), ended_at=at(40), outcome="succeeded")


# cancellation -------------------------------------------------------------------------


def test_a_cancel_requested_while_running_ends_the_attempt_as_cancelled() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.apply(machine.request_cancel(history.run, now=at(2), actor="ops", reason="stop"))
    # the request alone does not end the attempt
    assert attempts_from(history.events) == [Attempt(1, "worker-a", at(1))]
    history.succeed(at(3))  # the handler returned after the request
    assert history.run.status is RunStatus.CANCELLED

    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=at(3), outcome="cancelled"),
    ]


def test_a_cancel_finalised_after_the_lease_expired_ends_the_attempt_as_cancelled() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.apply(machine.request_cancel(history.run, now=at(2), actor="ops", reason="stop"))
    gone = at(1) + LEASE + timedelta(seconds=1)
    history.apply(
        recovery.recover_lease(
            history.run, now=gone, retry=None, settings=recovery.RecoverySettings()
        )
    )
    assert history.run.status is RunStatus.CANCELLED
    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=gone, outcome="cancelled"),
    ]


def test_cancelling_a_waiting_run_adds_no_attempt() -> None:
    history = History()
    history.start("worker-a", at(1))
    history.fail(FIRST, at(2), retry_at=at(100))
    history.apply(machine.request_cancel(history.run, now=at(3), actor="ops", reason="enough"))
    assert history.run.status is RunStatus.CANCELLED

    assert attempts_from(history.events) == [
        Attempt(1, "worker-a", at(1), ended_at=at(2), outcome="failed", failure=FIRST),
    ]


def test_cancelling_a_queued_run_has_no_attempts() -> None:
    history = History()
    history.apply(machine.request_cancel(history.run, now=at(1), actor="ops", reason="no"))
    assert attempts_from(history.events) == []
