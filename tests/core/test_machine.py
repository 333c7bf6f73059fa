"""The run state machine: every transition decided from (run, input, now), no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core import machine, recovery
from runlane_sqs.core.errors import IllegalTransition, LeaseLost
from runlane_sqs.core.machine import RepublishPolicy, Skip, SkipReason, Transition
from runlane_sqs.core.model import EventType, Failure, Lease, Run, RunEvent, RunStatus
from runlane_sqs.core.retry import RetryDecision

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
RUN_ID = "0123456789abcdef0123456789abcdef"
BOOM = Failure(type="builtins.ValueError", message="boom", traceback="Traceback ...")


def queued(now: datetime = NOW, due_at: datetime | None = None) -> Run:
    run, _ = machine.new_run(
        run_id=RUN_ID,
        environment="test",
        task="send",
        queue="default",
        payload={"to": "a@example.com"},
        now=now,
        due_at=due_at,
    )
    return run


def claimed(run: Run | None = None, token: str = "tok-1", now: datetime = NOW) -> Transition:
    decision = machine.claim_lease(
        run or queued(), now=now, owner="worker-a", token=token, duration=LEASE
    )
    assert isinstance(decision, Transition)
    return decision


def running(token: str = "tok-1") -> Run:
    return claimed(token=token).after


def assert_contiguous(transition: Transition) -> None:
    """Events continue the history without gaps and the run's seq names the last one."""
    seqs = [event.seq for event in transition.events]
    assert seqs == list(range(transition.before.seq + 1, transition.before.seq + 1 + len(seqs)))
    assert transition.after.seq == transition.before.seq + len(seqs)


# new_run -------------------------------------------------------------------------------


def test_new_run_is_queued_at_seq_1_with_a_triggered_event() -> None:
    run, event = machine.new_run(
        run_id=RUN_ID,
        environment="test",
        task="send",
        queue="default",
        payload={"x": 1},
        now=NOW,
        idempotency_key="order-1",
        singleton_key="user-7",
    )
    assert run.status is RunStatus.QUEUED
    assert run.seq == 1
    assert run.attempt == 0
    assert run.lease is None
    assert run.due_at == NOW
    assert run.created is True
    assert run.created_at == run.updated_at == NOW
    assert (run.idempotency_key, run.singleton_key) == ("order-1", "user-7")
    assert run.payload == {"x": 1}
    assert event == RunEvent(seq=1, type=EventType.TRIGGERED, at=NOW, attempt=0, data={})


def test_new_run_times_are_whole_milliseconds() -> None:
    now = NOW.replace(microsecond=123_456)
    run, event = machine.new_run(
        run_id=RUN_ID, environment="test", task="t", queue="q", payload=None, now=now
    )
    assert run.created_at.microsecond == 123_000
    assert run.due_at == run.created_at
    assert event.at == run.created_at


def test_new_run_with_a_delay_is_due_later_and_says_so_in_its_event() -> None:
    due = NOW + timedelta(hours=2)
    run, event = machine.new_run(
        run_id=RUN_ID, environment="test", task="t", queue="q", payload=None, now=NOW, due_at=due
    )
    assert run.due_at == due
    assert not run.is_due(NOW)
    assert run.is_due(due)
    assert event.data == {"due_at": due.isoformat()}


def test_new_run_published_at_once_is_looked_at_again_after_the_republish_delay() -> None:
    policy = RepublishPolicy(after=timedelta(minutes=5))
    soon = NOW + timedelta(seconds=30)
    run, _ = machine.new_run(
        run_id=RUN_ID,
        environment="t",
        task="t",
        queue="q",
        payload=None,
        now=NOW,
        due_at=soon,
        republish=policy,
    )
    assert run.wake_at == soon + timedelta(minutes=5)


def test_new_run_due_beyond_the_sqs_delay_limit_is_left_to_maintenance() -> None:
    later = NOW + timedelta(seconds=901)
    run, _ = machine.new_run(
        run_id=RUN_ID,
        environment="t",
        task="t",
        queue="q",
        payload=None,
        now=NOW,
        due_at=later,
        republish=RepublishPolicy(),
    )
    assert run.due_at == later
    assert run.wake_at is None


# claim_lease ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_claim_starts_the_next_attempt_of_a_due_runnable_run(status: RunStatus) -> None:
    before = queued().with_changes(status=status, attempt=2, seq=7, due_at=NOW - timedelta(1))
    decision = machine.claim_lease(before, now=NOW, owner="worker-a", token="tok-9", duration=LEASE)
    assert isinstance(decision, Transition)
    assert decision.before is before
    assert decision.fence is None
    after = decision.after
    assert after.status is RunStatus.RUNNING
    assert after.attempt == 3
    assert after.seq == 8
    assert after.due_at is None
    assert after.updated_at == NOW
    assert after.lease == Lease(owner="worker-a", token="tok-9", expires_at=NOW + LEASE)
    assert after.created is False
    assert decision.events == (
        RunEvent(seq=8, type=EventType.STARTED, at=NOW, attempt=3, data={"worker": "worker-a"}),
    )
    assert_contiguous(decision)


def test_claim_of_a_run_due_exactly_now_succeeds() -> None:
    run = queued(due_at=NOW + timedelta(seconds=30))
    assert isinstance(
        machine.claim_lease(
            run, now=NOW + timedelta(seconds=30), owner="w", token="t", duration=LEASE
        ),
        Transition,
    )


def test_claim_with_a_task_timeout_sets_the_attempt_deadline() -> None:
    before = queued().with_changes(wake_at=NOW + timedelta(minutes=5), publishes=2)
    decision = machine.claim_lease(
        before, now=NOW, owner="w", token="t", duration=LEASE, timeout=timedelta(minutes=10)
    )
    assert isinstance(decision, Transition)
    assert decision.after.deadline_at == NOW + timedelta(minutes=10)
    assert decision.after.wake_at is None
    assert decision.after.publishes == 0
    assert claimed().after.deadline_at is None


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_claim_of_a_terminal_run_is_skipped(status: RunStatus) -> None:
    run = queued().with_changes(status=status)
    decision = machine.claim_lease(run, now=NOW, owner="w", token="t", duration=LEASE)
    assert decision == Skip(SkipReason.TERMINAL)


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.CANCEL_REQUESTED])
def test_claim_of_a_leased_run_is_skipped(status: RunStatus) -> None:
    run = running().with_changes(status=status)
    later = NOW + timedelta(seconds=5)
    decision = machine.claim_lease(run, now=later, owner="worker-b", token="t2", duration=LEASE)
    assert decision == Skip(SkipReason.LEASED)


def test_claim_of_a_leased_run_is_skipped_even_after_its_lease_expired() -> None:
    # Expired leases are repaired by maintenance (expire_lease), never by a second claim.
    run = running()
    decision = machine.claim_lease(
        run, now=NOW + LEASE * 10, owner="worker-b", token="t2", duration=LEASE
    )
    assert decision == Skip(SkipReason.LEASED)


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_claim_before_due_is_skipped(status: RunStatus) -> None:
    run = queued().with_changes(status=status, due_at=NOW + timedelta(milliseconds=1))
    decision = machine.claim_lease(run, now=NOW, owner="w", token="t", duration=LEASE)
    assert decision == Skip(SkipReason.NOT_DUE)


# record_success ------------------------------------------------------------------------


def test_success_finishes_the_run_fenced_on_the_lease_token() -> None:
    before = running("tok-1")
    later = NOW + timedelta(seconds=3)
    transition = machine.record_success(before, token="tok-1", result={"sent": True}, now=later)
    assert transition.fence == "tok-1"
    after = transition.after
    assert after.status is RunStatus.SUCCEEDED
    assert after.result == {"sent": True}
    assert after.lease is None
    assert after.due_at is None
    assert after.attempt == before.attempt == 1
    assert after.updated_at == later
    assert transition.events == (
        RunEvent(seq=before.seq + 1, type=EventType.SUCCEEDED, at=later, attempt=1, data={}),
    )
    assert_contiguous(transition)


def test_success_with_another_token_is_lease_lost() -> None:
    with pytest.raises(LeaseLost):
        machine.record_success(running("tok-1"), token="tok-2", result=None, now=NOW)


@pytest.mark.parametrize(
    "status",
    [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED, RunStatus.SUCCEEDED],
)
def test_success_without_a_lease_is_lease_lost(status: RunStatus) -> None:
    run = queued().with_changes(status=status)
    with pytest.raises(LeaseLost):
        machine.record_success(run, token="tok-1", result=None, now=NOW)


def test_success_when_the_lease_was_cleared_is_lease_lost() -> None:
    run = running("tok-1").with_changes(lease=None)
    with pytest.raises(LeaseLost):
        machine.record_success(run, token="tok-1", result=None, now=NOW)


def test_success_while_cancel_requested_cancels_the_run() -> None:
    before = running("tok-1").with_changes(status=RunStatus.CANCEL_REQUESTED)
    transition = machine.record_success(before, token="tok-1", result={"done": 1}, now=NOW)
    assert transition.fence == "tok-1"
    assert transition.after.status is RunStatus.CANCELLED
    assert transition.after.lease is None
    assert transition.after.result is None
    assert [(e.type, e.data) for e in transition.events] == [
        (EventType.CANCELLED, {"after": "succeeded"})
    ]
    assert_contiguous(transition)


# record_failure ------------------------------------------------------------------------


def test_failure_with_a_retry_schedules_the_next_attempt() -> None:
    before = running("tok-1")
    retry_at = NOW + timedelta(seconds=30, microseconds=999)
    transition = machine.record_failure(
        before, token="tok-1", failure=BOOM, decision=RetryDecision(retry_at), now=NOW
    )
    assert transition.fence == "tok-1"
    after = transition.after
    assert after.status is RunStatus.RETRYING
    assert after.due_at == NOW + timedelta(seconds=30)  # whole milliseconds
    assert after.failure == BOOM
    assert after.lease is None
    assert after.attempt == 1
    assert transition.events == (
        RunEvent(
            seq=before.seq + 1,
            type=EventType.ATTEMPT_FAILED,
            at=NOW,
            attempt=1,
            data={"failure": BOOM.to_json(), "retry_at": after.due_at.isoformat()},
        ),
    )
    assert_contiguous(transition)


def test_a_retry_due_soon_is_published_by_the_worker_and_checked_later() -> None:
    policy = RepublishPolicy(after=timedelta(minutes=5))
    retry_at = NOW + timedelta(seconds=30)
    transition = machine.record_failure(
        running("tok-1"),
        token="tok-1",
        failure=BOOM,
        decision=RetryDecision(retry_at),
        now=NOW,
        republish=policy,
    )
    assert transition.after.wake_at == retry_at + timedelta(minutes=5)


def test_a_retry_due_beyond_the_sqs_delay_limit_is_left_to_maintenance() -> None:
    transition = machine.record_failure(
        running("tok-1"),
        token="tok-1",
        failure=BOOM,
        decision=RetryDecision(NOW + timedelta(hours=1)),
        now=NOW,
        republish=RepublishPolicy(),
    )
    assert transition.after.due_at == NOW + timedelta(hours=1)
    assert transition.after.wake_at is None


def test_failure_without_a_retry_fails_the_run_with_two_events() -> None:
    before = running("tok-1")
    transition = machine.record_failure(
        before, token="tok-1", failure=BOOM, decision=RetryDecision(None), now=NOW
    )
    after = transition.after
    assert after.status is RunStatus.FAILED
    assert after.failure == BOOM
    assert after.lease is None
    assert after.due_at is None
    assert after.seq == before.seq + 2
    assert [(e.seq, e.type, e.attempt) for e in transition.events] == [
        (before.seq + 1, EventType.ATTEMPT_FAILED, 1),
        (before.seq + 2, EventType.FAILED, 1),
    ]
    assert transition.events[0].data == {"failure": BOOM.to_json()}
    assert transition.events[1].data == {"attempts": 1}
    assert_contiguous(transition)


def test_failure_with_another_token_is_lease_lost() -> None:
    with pytest.raises(LeaseLost):
        machine.record_failure(
            running("tok-1"),
            token="tok-2",
            failure=BOOM,
            decision=RetryDecision(None),
            now=NOW,
        )


def test_failure_without_a_lease_is_lease_lost() -> None:
    with pytest.raises(LeaseLost):
        machine.record_failure(
            queued(), token="tok-1", failure=BOOM, decision=RetryDecision(None), now=NOW
        )


def test_failure_while_cancel_requested_cancels_the_run_without_a_retry() -> None:
    before = running("tok-1").with_changes(status=RunStatus.CANCEL_REQUESTED)
    transition = machine.record_failure(
        before,
        token="tok-1",
        failure=BOOM,
        decision=RetryDecision(NOW + timedelta(seconds=5)),
        now=NOW,
    )
    assert transition.fence == "tok-1"
    assert transition.after.status is RunStatus.CANCELLED
    assert transition.after.due_at is None
    assert [(e.type, e.data) for e in transition.events] == [
        (EventType.CANCELLED, {"after": "failed"})
    ]
    assert_contiguous(transition)


# request_cancel ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_cancel_of_a_waiting_run_is_immediate(status: RunStatus) -> None:
    before = queued().with_changes(status=status, due_at=NOW + timedelta(hours=1))
    transition = machine.request_cancel(before, now=NOW, actor="ops", reason="duplicate")
    assert transition.fence is None
    assert transition.after.status is RunStatus.CANCELLED
    assert transition.after.due_at is None
    assert [(e.type, e.data) for e in transition.events] == [
        (EventType.CANCELLED, {"actor": "ops", "reason": "duplicate"})
    ]
    assert_contiguous(transition)


def test_cancel_of_a_running_run_is_a_request_that_keeps_the_lease() -> None:
    before = running("tok-1")
    transition = machine.request_cancel(before, now=NOW, actor="ops", reason="stop")
    assert transition.after.status is RunStatus.CANCEL_REQUESTED
    assert transition.after.lease == before.lease
    assert [e.type for e in transition.events] == [EventType.CANCEL_REQUESTED]
    assert_contiguous(transition)


@pytest.mark.parametrize(
    "status",
    [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CANCEL_REQUESTED],
)
def test_cancel_of_a_finished_or_already_cancelling_run_is_illegal(status: RunStatus) -> None:
    run = running("tok-1").with_changes(status=status)
    with pytest.raises(IllegalTransition):
        machine.request_cancel(run, now=NOW, actor="ops", reason="again")


# renew_lease ---------------------------------------------------------------------------


def test_renew_extends_the_lease_of_its_own_token() -> None:
    run = running("tok-1")
    later = NOW + timedelta(seconds=20)
    lease = machine.renew_lease(run, token="tok-1", now=later, duration=LEASE)
    assert lease == Lease(owner="worker-a", token="tok-1", expires_at=later + LEASE)


def test_renew_works_while_cancel_requested() -> None:
    run = running("tok-1").with_changes(status=RunStatus.CANCEL_REQUESTED)
    lease = machine.renew_lease(run, token="tok-1", now=NOW, duration=LEASE)
    assert lease.expires_at == NOW + LEASE


def test_renew_with_another_token_is_lease_lost() -> None:
    with pytest.raises(LeaseLost):
        machine.renew_lease(running("tok-1"), token="tok-2", now=NOW, duration=LEASE)


def test_renew_of_a_finished_run_is_lease_lost() -> None:
    run = machine.record_success(running("tok-1"), token="tok-1", result=1, now=NOW).after
    with pytest.raises(LeaseLost):
        machine.renew_lease(run, token="tok-1", now=NOW, duration=LEASE)


# expire_lease (maintenance's repair, in core/recovery.py) ---------------------------------


def test_expired_lease_makes_the_same_run_runnable_again() -> None:
    before = running("tok-1")
    expiry = NOW + LEASE
    transition = recovery.expire_lease(before, now=expiry)
    assert isinstance(transition, Transition)
    assert transition.fence == "tok-1"
    after = transition.after
    assert after.id == before.id
    assert after.status is RunStatus.QUEUED
    assert after.lease is None
    assert after.due_at == expiry
    assert after.attempt == 1
    assert after.lease_losses == 1
    assert transition.events == (
        RunEvent(
            seq=before.seq + 1,
            type=EventType.LEASE_EXPIRED,
            at=expiry,
            attempt=1,
            data={"worker": "worker-a", "losses": 1},
        ),
    )
    assert_contiguous(transition)
    # ... and the next claim starts attempt 2 of the same run
    assert claimed(after, token="tok-2", now=expiry).after.attempt == 2


def test_live_lease_is_not_expired() -> None:
    run = running("tok-1")
    decision = recovery.expire_lease(run, now=NOW + LEASE - timedelta(milliseconds=1))
    assert decision == Skip(SkipReason.LEASED)


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_expire_never_touches_a_terminal_run(status: RunStatus) -> None:
    # Even one still carrying a stale lease: a lifecycle change that won is preserved.
    run = running("tok-1").with_changes(status=status)
    assert recovery.expire_lease(run, now=NOW + LEASE * 10) == Skip(SkipReason.TERMINAL)


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_expire_skips_runs_without_a_lease(status: RunStatus) -> None:
    run = queued().with_changes(status=status)
    assert isinstance(recovery.expire_lease(run, now=NOW + LEASE * 10), Skip)


def test_expire_leaves_cancel_requested_runs_to_cancellation() -> None:
    run = running("tok-1").with_changes(status=RunStatus.CANCEL_REQUESTED)
    assert isinstance(recovery.expire_lease(run, now=NOW + LEASE * 10), Skip)


def test_too_many_lost_leases_in_a_row_fail_the_run() -> None:
    settings = recovery.RecoverySettings(max_lease_losses=2)
    before = running("tok-1").with_changes(lease_losses=1)
    transition = recovery.expire_lease(before, now=NOW + LEASE, settings=settings)
    assert isinstance(transition, Transition)
    assert transition.fence == "tok-1"
    assert transition.after.status is RunStatus.FAILED
    assert transition.after.failure is not None
    assert transition.after.failure.type == recovery.LEASE_LOST
    assert [e.type for e in transition.events] == [EventType.LEASE_EXPIRED, EventType.FAILED]
    assert_contiguous(transition)


def test_an_expired_attempt_cannot_record_its_outcome_after_recovery() -> None:
    stale = running("tok-1")
    recovered = recovery.expire_lease(stale, now=NOW + LEASE)
    assert isinstance(recovered, Transition)
    with pytest.raises(LeaseLost):
        machine.record_success(recovered.after, token="tok-1", result=1, now=NOW + LEASE)
    reclaimed = claimed(recovered.after, token="tok-2", now=NOW + LEASE)
    assert reclaimed.after.attempt == 2
    with pytest.raises(LeaseLost):
        machine.record_failure(
            reclaimed.after,
            token="tok-1",
            failure=BOOM,
            decision=RetryDecision(None),
            now=NOW + LEASE,
        )


# a whole life ------------------------------------------------------------------------


def test_a_run_history_is_gapless_across_retries() -> None:
    run, first = machine.new_run(
        run_id=RUN_ID, environment="test", task="t", queue="q", payload=None, now=NOW
    )
    history = [first]
    now = NOW
    for attempt, token in enumerate(["a", "b", "c"], start=1):
        claim = claimed(run, token=token, now=now)
        history += claim.events
        assert claim.after.attempt == attempt
        decision = RetryDecision(now + timedelta(seconds=5) if attempt < 3 else None)
        failed = machine.record_failure(
            claim.after, token=token, failure=BOOM, decision=decision, now=now
        )
        history += failed.events
        assert_contiguous(failed)
        run = failed.after
        now += timedelta(seconds=5)
    assert run.status is RunStatus.FAILED
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    assert run.seq == len(history)
    assert [e.type for e in history].count(EventType.ATTEMPT_FAILED) == 3
    assert history[-1].type is EventType.FAILED
    assert history[-1].data == {"attempts": 3}
