"""Maintenance's pure decisions (core/recovery.py) and the agenda (core/indexes.py).

Lease expiry, attempt deadlines, republishing and abandoned cancellations at the level
of (run, now, settings) -> Transition | Skip: what a pass publishes, when it publishes
again, how an expired lease or a passed deadline is repaired on the *same* run, and how
cancellation finishes. No I/O, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core import machine
from runlane_sqs.core.errors import IllegalTransition
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.machine import (
    RepublishPolicy,
    Skip,
    SkipReason,
    Transition,
    agenda_entry,
    eager_wake_at,
)
from runlane_sqs.core.model import EventType, Failure, Lease, Run, RunStatus
from runlane_sqs.core.recovery import (
    ATTEMPT_TIMEOUT,
    LEASE_LOST,
    RecoverySettings,
    plan_publish,
    recover_lease,
)
from runlane_sqs.core.retry import RetryDecision, RetryPolicy

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
RUN_ID = "fedcba9876543210fedcba9876543210"
POLICY = RepublishPolicy()
SETTINGS = RecoverySettings(max_lease_losses=3, republish=POLICY)
RETRY_TWICE = RetryPolicy(max_attempts=2, backoff="fixed", delay=30)
NO_RETRY = RetryPolicy(max_attempts=1)
BOOM = Failure(type="builtins.ValueError", message="boom")


def queued(*, now: datetime = NOW, due_at: datetime | None = None, **changes: object) -> Run:
    run, _ = machine.new_run(
        run_id=RUN_ID,
        environment="test",
        task="work",
        queue="default",
        payload={"n": 1},
        now=now,
        due_at=due_at,
    )
    return run.with_changes(created=False, **changes)


def running(
    *,
    at: datetime = NOW,
    lease: timedelta = LEASE,
    timeout: timedelta | None = None,
    run: Run | None = None,
    token: str = "tok-1",
) -> Run:
    decision = machine.claim_lease(
        run or queued(now=at),
        now=at,
        owner="worker-a",
        token=token,
        duration=lease,
        timeout=timeout,
    )
    assert isinstance(decision, Transition)
    return decision.after


def cancel_requested(**options: object) -> Run:
    run = running(**options)  # type: ignore[arg-type]
    return machine.request_cancel(run, now=NOW, actor="ops", reason="stop").after


def finished(status: RunStatus) -> Run:
    run = running()
    assert run.lease is not None
    token = run.lease.token
    if status is RunStatus.SUCCEEDED:
        return machine.record_success(run, token=token, result=1, now=NOW).after
    if status is RunStatus.FAILED:
        decision = RetryDecision(retry_at=None)
        return machine.record_failure(
            run, token=token, failure=BOOM, decision=decision, now=NOW
        ).after
    return machine.request_cancel(queued(), now=NOW, actor="ops", reason="x").after


def transition(decision: Transition | Skip) -> Transition:
    assert isinstance(decision, Transition), decision
    return decision


def kinds(decision: Transition) -> list[EventType]:
    return [event.type for event in decision.events]


def assert_contiguous(decision: Transition) -> None:
    seqs = [event.seq for event in decision.events]
    assert seqs == list(range(decision.before.seq + 1, decision.before.seq + 1 + len(seqs)))
    assert decision.after.seq == decision.before.seq + len(seqs)


# RepublishPolicy ------------------------------------------------------------------------


def test_republish_delay_doubles_with_each_publish() -> None:
    policy = RepublishPolicy(after=timedelta(minutes=5), max_after=timedelta(hours=1))
    delays = [policy.next_wake(NOW, n) - NOW for n in range(4)]
    assert delays == [timedelta(minutes=m) for m in (5, 10, 20, 40)]


def test_republish_delay_is_capped() -> None:
    policy = RepublishPolicy(after=timedelta(minutes=5), max_after=timedelta(hours=1))
    assert policy.next_wake(NOW, 4) - NOW == timedelta(hours=1)
    assert policy.next_wake(NOW, 10) - NOW == timedelta(hours=1)
    assert policy.next_wake(NOW, 10_000) - NOW == timedelta(hours=1)


def test_republish_defaults_are_five_minutes_and_one_hour() -> None:
    assert POLICY.after == timedelta(minutes=5)
    assert POLICY.max_after == timedelta(hours=1)


# eager_wake_at --------------------------------------------------------------------------


def test_eager_wake_at_for_a_run_due_now_is_one_republish_delay_later() -> None:
    assert eager_wake_at(NOW, NOW, POLICY) == NOW + POLICY.after


def test_eager_wake_at_counts_from_the_due_time_within_the_sqs_delay_limit() -> None:
    due = NOW + timedelta(seconds=MAX_DELAY_SECONDS)
    assert eager_wake_at(due, NOW, POLICY) == due + POLICY.after
    due = NOW + timedelta(seconds=10)
    assert eager_wake_at(due, NOW, POLICY) == due + POLICY.after


def test_eager_wake_at_of_a_past_due_time_counts_from_now() -> None:
    assert eager_wake_at(NOW - timedelta(hours=1), NOW, POLICY) == NOW + POLICY.after


def test_eager_wake_at_beyond_the_sqs_delay_limit_is_left_to_maintenance() -> None:
    assert eager_wake_at(NOW + timedelta(seconds=MAX_DELAY_SECONDS + 1), NOW, POLICY) is None
    assert eager_wake_at(NOW + timedelta(days=3), NOW, POLICY) is None


# agenda_entry ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_terminal_runs_are_not_on_the_agenda(status: RunStatus) -> None:
    assert agenda_entry(finished(status)) is None


def test_a_leased_run_is_listed_at_its_lease_expiry() -> None:
    run = running()
    assert run.lease is not None
    assert agenda_entry(run) == (AgendaKind.RUN, run.lease.expires_at)


def test_a_leased_run_with_an_earlier_deadline_is_listed_at_the_deadline() -> None:
    run = running(timeout=timedelta(seconds=20))
    assert run.deadline_at == NOW + timedelta(seconds=20)
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + timedelta(seconds=20))


def test_a_leased_run_with_a_later_deadline_is_listed_at_the_lease_expiry() -> None:
    run = running(timeout=timedelta(minutes=10))
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + LEASE)


def test_a_cancel_requested_run_stays_on_the_lease_agenda() -> None:
    run = cancel_requested()
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + LEASE)


def test_a_runnable_run_is_listed_at_its_wake_time() -> None:
    run = queued(due_at=NOW + timedelta(minutes=1)).with_changes(wake_at=NOW + timedelta(minutes=6))
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + timedelta(minutes=6))


def test_a_runnable_run_without_a_wake_time_is_listed_at_its_due_time() -> None:
    run = queued(due_at=NOW + timedelta(hours=3))
    assert run.wake_at is None
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + timedelta(hours=3))


def test_a_runnable_run_without_a_due_time_is_not_listed() -> None:
    run = queued(status=RunStatus.RELEASED, due_at=None).with_changes(due_at=None)
    assert agenda_entry(run) is None


# plan_publish ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_a_due_runnable_run_gets_a_wakeup_and_a_later_wake_time(status: RunStatus) -> None:
    run = queued(due_at=NOW - timedelta(seconds=1)).with_changes(status=status)
    decision = transition(plan_publish(run, now=NOW, policy=POLICY))
    assert decision.events == ()
    assert decision.guard == ("publishes",)
    assert decision.fence is None
    assert decision.after.publishes == run.publishes + 1 == 1
    assert decision.after.wake_at == NOW + POLICY.after
    assert decision.after.seq == run.seq
    assert decision.after.status is status
    assert decision.after.due_at == run.due_at


def test_each_republish_of_the_same_run_waits_twice_as_long() -> None:
    run = queued(due_at=NOW - timedelta(hours=1)).with_changes(publishes=2)
    decision = transition(plan_publish(run, now=NOW, policy=POLICY))
    assert decision.after.publishes == 3
    assert decision.after.wake_at == NOW + 4 * POLICY.after


def test_a_published_run_is_not_published_again_before_its_wake_time() -> None:
    run = queued(due_at=NOW - timedelta(minutes=1))
    first = transition(plan_publish(run, now=NOW, policy=POLICY)).after
    later = NOW + POLICY.after - timedelta(milliseconds=1)
    assert plan_publish(first, now=later, policy=POLICY) == Skip(SkipReason.NOT_DUE)
    again = transition(plan_publish(first, now=NOW + POLICY.after, policy=POLICY))
    assert again.after.publishes == 2


def test_a_run_due_later_is_not_published() -> None:
    run = queued(due_at=NOW + timedelta(seconds=1))
    assert plan_publish(run, now=NOW, policy=POLICY) == Skip(SkipReason.NOT_DUE)


def test_a_run_due_now_with_a_later_wake_time_is_not_published() -> None:
    run = queued(due_at=NOW).with_changes(wake_at=NOW + timedelta(minutes=5))
    assert plan_publish(run, now=NOW, policy=POLICY) == Skip(SkipReason.NOT_DUE)


def test_a_run_due_exactly_now_is_published() -> None:
    run = queued(due_at=NOW)
    assert isinstance(plan_publish(run, now=NOW, policy=POLICY), Transition)


def test_a_runnable_run_without_a_due_time_is_not_published() -> None:
    run = queued(status=RunStatus.RELEASED).with_changes(due_at=None)
    assert plan_publish(run, now=NOW, policy=POLICY) == Skip(SkipReason.NOT_DUE)


def test_a_leased_run_is_not_published() -> None:
    assert plan_publish(running(), now=NOW + timedelta(hours=1), policy=POLICY) == Skip(
        SkipReason.LEASED
    )
    assert plan_publish(cancel_requested(), now=NOW, policy=POLICY) == Skip(SkipReason.LEASED)


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_terminal_run_is_never_published(status: RunStatus) -> None:
    run = finished(status)
    assert plan_publish(run, now=NOW + timedelta(days=1), policy=POLICY) == Skip(
        SkipReason.TERMINAL
    )


# recover_lease: deadlines ----------------------------------------------------------------


def test_deadline_and_lease_both_passed_record_a_timeout_not_a_lease_expiry() -> None:
    run = running(timeout=timedelta(seconds=30), lease=LEASE)
    later = NOW + timedelta(minutes=5)
    decision = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.ATTEMPT_TIMED_OUT]
    assert EventType.LEASE_EXPIRED not in kinds(decision)
    assert decision.after.status is RunStatus.RETRYING
    assert decision.after.attempt == run.attempt == 1
    assert decision.after.lease is None
    assert decision.after.deadline_at is None
    assert decision.after.due_at == later + timedelta(seconds=30)
    assert decision.after.failure is not None
    assert decision.after.failure.type == ATTEMPT_TIMEOUT
    assert decision.events[0].data["retry_at"] == (later + timedelta(seconds=30)).isoformat()
    assert decision.events[0].data["failure"]["type"] == ATTEMPT_TIMEOUT
    assert run.lease is not None
    assert decision.fence == run.lease.token
    assert_contiguous(decision)


def test_a_timeout_on_the_last_allowed_attempt_fails_the_run() -> None:
    run = running(timeout=timedelta(seconds=30))
    later = NOW + timedelta(minutes=5)
    decision = transition(recover_lease(run, now=later, retry=NO_RETRY, settings=SETTINGS))
    assert kinds(decision) == [EventType.ATTEMPT_TIMED_OUT, EventType.FAILED]
    assert decision.after.status is RunStatus.FAILED
    assert decision.after.failure is not None
    assert decision.after.failure.type == ATTEMPT_TIMEOUT
    assert decision.after.lease is None
    assert decision.after.due_at is None
    assert_contiguous(decision)


def test_a_second_timeout_exhausts_a_two_attempt_policy() -> None:
    first = running(timeout=timedelta(seconds=30))
    t1 = NOW + timedelta(seconds=90)
    retrying = transition(recover_lease(first, now=t1, retry=RETRY_TWICE, settings=SETTINGS)).after
    assert retrying.status is RunStatus.RETRYING
    assert retrying.due_at is not None
    second = running(at=retrying.due_at, timeout=timedelta(seconds=30), run=retrying, token="t2")
    assert second.attempt == 2
    t2 = retrying.due_at + timedelta(seconds=31)
    decision = transition(recover_lease(second, now=t2, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.ATTEMPT_TIMED_OUT, EventType.FAILED]
    assert decision.after.status is RunStatus.FAILED
    assert decision.fence == "t2"


def test_a_passed_deadline_times_out_even_while_the_lease_is_live() -> None:
    run = running(timeout=timedelta(seconds=10), lease=LEASE)
    later = NOW + timedelta(seconds=11)
    assert run.lease is not None and run.lease.is_live(later)
    decision = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.ATTEMPT_TIMED_OUT]
    assert decision.after.status is RunStatus.RETRYING
    assert decision.fence == run.lease.token


def test_a_deadline_of_an_unknown_task_waits_while_the_lease_is_live() -> None:
    """Without the task's retry policy this process cannot finalize the timeout."""
    run = running(timeout=timedelta(seconds=10), lease=LEASE)
    later = NOW + timedelta(seconds=11)
    assert isinstance(recover_lease(run, now=later, retry=None, settings=SETTINGS), Skip)


def test_a_deadline_of_an_unknown_task_is_not_lost_to_a_lease_expiry() -> None:
    """recover_lease's own docstring: "``None`` when this process does
    not know the task: the deadline then waits for a process that does". Once the lease
    has expired too, a ``lease_expired`` recovery would clear ``deadline_at`` and lose
    the durable timeout (the attempt would never be recorded as timed out)."""
    run = running(timeout=timedelta(seconds=10), lease=LEASE)
    later = NOW + timedelta(minutes=5)
    decision = recover_lease(run, now=later, retry=None, settings=SETTINGS)
    assert isinstance(decision, Skip), (
        "a passed deadline was turned into a lease expiry; the timeout is lost"
    )


def test_a_deadline_not_yet_passed_with_a_live_lease_is_skipped() -> None:
    run = running(timeout=timedelta(seconds=30))
    later = NOW + timedelta(seconds=29)
    assert recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS) == Skip(
        SkipReason.LEASED
    )


# recover_lease: expired leases -----------------------------------------------------------


def test_an_expired_lease_makes_the_same_run_queued_again() -> None:
    run = running()
    assert run.lease is not None
    later = NOW + LEASE + timedelta(seconds=1)
    decision = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.LEASE_EXPIRED]
    assert decision.events[0].data == {"worker": "worker-a", "losses": 1}
    after = decision.after
    assert after.id == run.id
    assert after.status is RunStatus.QUEUED
    assert after.lease is None
    assert after.lease_losses == run.lease_losses + 1 == 1
    assert after.attempt == run.attempt
    assert after.due_at == later
    assert after.wake_at == later + POLICY.after
    assert after.publishes == 0
    assert decision.fence == run.lease.token
    assert_contiguous(decision)


def test_a_lease_expiring_exactly_now_is_expired() -> None:
    run = running()
    decision = recover_lease(run, now=NOW + LEASE, retry=NO_RETRY, settings=SETTINGS)
    assert kinds(transition(decision)) == [EventType.LEASE_EXPIRED]


def test_the_third_lost_lease_in_a_row_fails_the_run_with_lease_lost() -> None:
    at = NOW
    run = running(at=at, token="t1")
    for loss in (1, 2):
        at += LEASE + timedelta(seconds=1)
        decision = transition(recover_lease(run, now=at, retry=RETRY_TWICE, settings=SETTINGS))
        assert decision.after.status is RunStatus.QUEUED
        assert decision.after.lease_losses == loss
        run = running(at=at, run=decision.after, token=f"t{loss + 1}")
        assert run.lease_losses == loss
    at += LEASE + timedelta(seconds=1)
    decision = transition(recover_lease(run, now=at, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.LEASE_EXPIRED, EventType.FAILED]
    assert decision.after.status is RunStatus.FAILED
    assert decision.after.lease_losses == 3
    assert decision.after.failure is not None
    assert decision.after.failure.type == LEASE_LOST
    assert decision.after.failure.retryable is False
    assert decision.after.lease is None
    assert decision.after.due_at is None
    assert decision.after.attempt == 3
    assert decision.fence == "t3"
    assert_contiguous(decision)


def test_the_lease_loss_limit_is_configurable() -> None:
    run = running()
    later = NOW + LEASE + timedelta(seconds=1)
    settings = RecoverySettings(max_lease_losses=1)
    decision = transition(recover_lease(run, now=later, retry=NO_RETRY, settings=settings))
    assert decision.after.status is RunStatus.FAILED
    assert decision.after.failure is not None
    assert decision.after.failure.type == LEASE_LOST


def test_a_recorded_outcome_resets_the_lease_loss_count() -> None:
    run = running()
    later = NOW + LEASE + timedelta(seconds=1)
    requeued = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    second = running(at=later, run=requeued.after, token="t2")
    failed = machine.record_failure(
        second,
        token="t2",
        failure=BOOM,
        decision=RetryDecision(retry_at=later + timedelta(seconds=1)),
        now=later,
    )
    assert failed.after.lease_losses == 0


def test_a_live_lease_without_a_deadline_is_left_alone() -> None:
    run = running()
    assert recover_lease(run, now=NOW + LEASE / 2, retry=RETRY_TWICE, settings=SETTINGS) == Skip(
        SkipReason.LEASED
    )


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_recovery_never_touches_a_terminal_run(status: RunStatus) -> None:
    run = finished(status)
    # even one that still (wrongly) carries an expired lease and a passed deadline
    stale = run.with_changes(lease=Lease(owner="w", token="t", expires_at=NOW), deadline_at=NOW)
    for candidate in (run, stale):
        decision = recover_lease(
            candidate, now=NOW + timedelta(days=1), retry=RETRY_TWICE, settings=SETTINGS
        )
        assert decision == Skip(SkipReason.TERMINAL)


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_recovery_skips_runnable_runs(status: RunStatus) -> None:
    run = queued(status=status)
    decision = recover_lease(run, now=NOW + timedelta(days=1), retry=NO_RETRY, settings=SETTINGS)
    assert isinstance(decision, Skip)


# recover_lease: abandoned cancellations -------------------------------------------------


def test_a_cancel_request_with_an_expired_lease_is_finalized_as_cancelled() -> None:
    run = cancel_requested()
    assert run.lease is not None
    later = NOW + LEASE + timedelta(seconds=1)
    decision = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.CANCELLED]
    assert decision.events[0].data == {"after": "lease_expired", "worker": "worker-a"}
    assert decision.after.status is RunStatus.CANCELLED
    assert decision.after.lease is None
    assert decision.fence == run.lease.token
    assert agenda_entry(decision.after) is None
    assert_contiguous(decision)


def test_a_cancel_request_with_a_live_lease_waits_for_the_worker() -> None:
    run = cancel_requested()
    assert recover_lease(run, now=NOW + LEASE / 2, retry=NO_RETRY, settings=SETTINGS) == Skip(
        SkipReason.LEASED
    )


def test_a_cancel_request_past_its_deadline_is_cancelled_not_timed_out() -> None:
    run = cancel_requested(timeout=timedelta(seconds=10))
    later = NOW + LEASE + timedelta(seconds=1)
    decision = transition(recover_lease(run, now=later, retry=RETRY_TWICE, settings=SETTINGS))
    assert kinds(decision) == [EventType.CANCELLED]
    assert decision.after.status is RunStatus.CANCELLED


# machine.request_cancel and outcomes under a cancel request ------------------------------


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_cancel_of_a_waiting_run_is_immediate_and_records_who_and_why(status: RunStatus) -> None:
    run = queued(due_at=NOW + timedelta(hours=1), status=status).with_changes(
        wake_at=NOW + timedelta(hours=1)
    )
    decision = machine.request_cancel(run, now=NOW, actor="alice", reason="duplicate order")
    assert kinds(decision) == [EventType.CANCELLED]
    assert decision.events[0].data == {"actor": "alice", "reason": "duplicate order"}
    assert decision.after.status is RunStatus.CANCELLED
    assert decision.after.due_at is None
    assert decision.after.wake_at is None
    assert agenda_entry(decision.after) is None
    assert_contiguous(decision)


def test_cancel_of_a_running_run_is_a_request_that_keeps_the_lease() -> None:
    run = running()
    decision = machine.request_cancel(run, now=NOW, actor="alice", reason="stop")
    assert kinds(decision) == [EventType.CANCEL_REQUESTED]
    assert decision.events[0].data == {"actor": "alice", "reason": "stop"}
    assert decision.after.status is RunStatus.CANCEL_REQUESTED
    assert decision.after.lease == run.lease
    assert decision.fence is None


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_cancel_of_a_finished_run_is_illegal(status: RunStatus) -> None:
    with pytest.raises(IllegalTransition, match="already"):
        machine.request_cancel(finished(status), now=NOW, actor="alice", reason="late")


def test_success_under_a_cancel_request_cancels_the_run() -> None:
    run = cancel_requested()
    assert run.lease is not None
    decision = machine.record_success(run, token=run.lease.token, result={"ok": 1}, now=NOW)
    assert kinds(decision) == [EventType.CANCELLED]
    assert decision.events[0].data == {"after": "succeeded"}
    assert decision.after.status is RunStatus.CANCELLED
    assert decision.after.lease is None
    assert decision.fence == run.lease.token


def test_failure_under_a_cancel_request_cancels_the_run_without_a_retry() -> None:
    run = cancel_requested()
    assert run.lease is not None
    decision = machine.record_failure(
        run,
        token=run.lease.token,
        failure=BOOM,
        decision=RetryDecision(retry_at=NOW + timedelta(seconds=5)),
        now=NOW,
    )
    assert kinds(decision) == [EventType.CANCELLED]
    assert decision.events[0].data == {"after": "failed"}
    assert decision.after.status is RunStatus.CANCELLED
    assert decision.after.due_at is None
    assert decision.after.lease is None
