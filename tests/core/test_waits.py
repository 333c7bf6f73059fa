"""Waits without failing, decided without I/O: release, resume, durable steps and tokens.

A release ends the attempt with no failure and no retry cost; a resume
writes the wait's result into the run and makes it runnable only if it still waits at
that very wait; a signal wait past its timeout records ``timed_out`` when claimed; a
token is decided once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core import machine, waits
from runlane_sqs.core import tokens as core_tokens
from runlane_sqs.core.errors import IllegalTransition, LeaseLost
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.machine import RepublishPolicy, Skip, SkipReason, Transition, agenda_entry
from runlane_sqs.core.model import (
    JSON,
    EventType,
    Failure,
    Lease,
    Run,
    RunEvent,
    RunStatus,
    Wait,
    WaitKind,
)
from runlane_sqs.core.retry import RetryPolicy
from runlane_sqs.core.tokens import Token, TokenAlreadyDecided, TokenResult, TokenStatus
from runlane_sqs.testing import in_memory_app

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)
RUN_ID = "0123456789abcdef0123456789abcdef"
OTHER_ID = "fedcba9876543210fedcba9876543210"
TOKEN_ID = "00112233445566778899aabbccddeeff"
POLICY = RepublishPolicy(after=timedelta(minutes=5), max_after=timedelta(hours=1))
BOOM = Failure(type="builtins.ValueError", message="boom")


def queued() -> Run:
    run, _ = machine.new_run(
        run_id=RUN_ID, environment="test", task="t", queue="default", payload={"n": 1}, now=NOW
    )
    return run


def claim(run: Run, token: str = "tok-1", now: datetime = NOW) -> Transition:
    decision = machine.claim_lease(run, now=now, owner="worker-a", token=token, duration=LEASE)
    assert isinstance(decision, Transition), decision
    return decision


def running(token: str = "tok-1") -> Run:
    return claim(queued(), token).after


def released(wait: Wait, token: str = "tok-1", now: datetime = NOW) -> Run:
    return waits.release(running(token), token=token, wait=wait, now=now, republish=POLICY).after


def time_wait(until: datetime) -> Wait:
    return Wait(WaitKind.TIME, waits.wait_name(WaitKind.TIME, None, 1), None, until)


def signal_wait(key: str = "approved", until: datetime | None = None) -> Wait:
    return Wait(WaitKind.SIGNAL, waits.wait_name(WaitKind.SIGNAL, key, 1), key, until)


def token_wait(token_id: str = TOKEN_ID) -> Wait:
    return Wait(WaitKind.TOKEN, waits.wait_name(WaitKind.TOKEN, token_id, 1), token_id)


def run_wait(run_id: str = OTHER_ID) -> Wait:
    return Wait(WaitKind.RUN, waits.wait_name(WaitKind.RUN, run_id, 1), run_id)


def resume(run: Run, wait: Wait, result: dict[str, JSON], now: datetime = NOW) -> Transition | Skip:
    return waits.resume(
        run,
        wait=wait,
        result=result,
        event=EventType.SIGNAL_RECEIVED,
        data={"key": wait.target},
        now=now,
        republish=POLICY,
    )


def assert_contiguous(transition: Transition) -> None:
    seqs = [event.seq for event in transition.events]
    assert seqs == list(range(transition.before.seq + 1, transition.before.seq + 1 + len(seqs)))
    assert transition.after.seq == transition.before.seq + len(seqs)


# wait names ---------------------------------------------------------------------------


def test_a_wait_is_named_by_kind_target_and_occurrence() -> None:
    assert waits.wait_name(WaitKind.TIME, None, 1) == "time:#1"
    assert waits.wait_name(WaitKind.SIGNAL, "approved", 2) == "signal:approved#2"
    assert waits.wait_name(WaitKind.TOKEN, TOKEN_ID, 1) == f"token:{TOKEN_ID}#1"
    assert waits.wait_name(WaitKind.RUN, OTHER_ID, 3) == f"run:{OTHER_ID}#3"


@pytest.mark.parametrize(
    "wait",
    [time_wait(NOW), signal_wait(), signal_wait(until=NOW), token_wait(), run_wait()],
    ids=["time", "signal", "signal with timeout", "token", "run"],
)
def test_a_wait_round_trips_through_json(wait: Wait) -> None:
    assert Wait.from_json(wait.to_json()) == wait


# release ------------------------------------------------------------------------------


def test_a_time_release_ends_the_attempt_without_failure() -> None:
    before = running().with_changes(deadline_at=NOW + timedelta(minutes=10), lease_losses=1)
    until = NOW + timedelta(hours=3)
    wait = time_wait(until)
    decision = waits.release(before, token="tok-1", wait=wait, now=NOW, republish=POLICY)
    after = decision.after
    assert decision.fence == "tok-1"
    assert after.status is RunStatus.RELEASED
    assert after.waiting == wait
    assert after.due_at == until
    assert after.lease is None
    assert after.deadline_at is None
    assert after.lease_losses == 0
    assert after.publishes == 0
    assert after.attempt == before.attempt == 1
    # no retry cost: nothing is recorded as a failure
    assert after.failures == before.failures == 0
    assert after.failure is None
    assert decision.events == (
        RunEvent(
            seq=before.seq + 1,
            type=EventType.RELEASED,
            at=NOW,
            attempt=1,
            data={"wait": wait.to_json()},
        ),
    )
    assert_contiguous(decision)


def test_a_release_keeps_earlier_failures_as_they_were() -> None:
    before = running().with_changes(failures=2, failure=BOOM)
    after = waits.release(
        before, token="tok-1", wait=time_wait(NOW), now=NOW, republish=POLICY
    ).after
    assert after.failures == 2
    assert after.failure == BOOM


def test_a_long_time_release_is_left_to_maintenance_at_its_due_time() -> None:
    until = NOW + timedelta(hours=3)
    run = released(time_wait(until))
    assert run.wake_at is None
    assert agenda_entry(run) == (AgendaKind.RUN, until)
    assert not run.is_due(until - timedelta(milliseconds=1))
    assert run.is_due(until)


@pytest.mark.parametrize(
    "delay", [timedelta(0), timedelta(seconds=30), timedelta(seconds=900)], ids=str
)
def test_a_short_time_release_is_published_at_once_and_looked_at_after_the_delay(
    delay: timedelta,
) -> None:
    run = released(time_wait(NOW + delay))
    assert run.due_at == NOW + delay
    assert run.wake_at == NOW + delay + POLICY.after
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + delay + POLICY.after)


def test_a_time_release_just_past_the_sqs_delay_limit_waits_for_maintenance() -> None:
    run = released(time_wait(NOW + timedelta(seconds=901)))
    assert run.wake_at is None


def test_release_times_are_whole_milliseconds() -> None:
    until = NOW + timedelta(hours=1, microseconds=123_456)
    now = NOW.replace(microsecond=987_654)
    run = released(time_wait(until), now=now)
    assert run.due_at == NOW + timedelta(hours=1, microseconds=123_000)
    assert run.waiting is not None
    assert run.waiting.until == run.due_at
    assert run.updated_at == NOW.replace(microsecond=987_000)


def test_a_signal_wait_with_a_timeout_is_due_at_the_timeout() -> None:
    timeout_at = NOW + timedelta(minutes=30)
    run = released(signal_wait(until=timeout_at))
    assert run.status is RunStatus.RELEASED
    assert run.due_at == timeout_at
    assert run.wake_at is None
    assert agenda_entry(run) == (AgendaKind.RUN, timeout_at)


def test_a_signal_wait_without_timeout_has_no_due_time_and_is_not_on_the_agenda() -> None:
    run = released(signal_wait())
    assert run.due_at is None
    assert run.wake_at is None
    assert agenda_entry(run) is None
    assert not run.is_due(NOW + timedelta(days=365))


@pytest.mark.parametrize("wait", [token_wait(), run_wait()], ids=["token", "run"])
def test_token_and_run_waits_have_no_due_time_and_are_polled_after_the_republish_delay(
    wait: Wait,
) -> None:
    run = released(wait)
    assert run.status is RunStatus.RELEASED
    assert run.waiting == wait
    assert run.due_at is None
    assert run.wake_at == NOW + POLICY.after
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + POLICY.after)
    assert not run.is_due(NOW + timedelta(days=1))


def test_a_release_after_a_cancel_request_cancels_the_run() -> None:
    before = running().with_changes(status=RunStatus.CANCEL_REQUESTED)
    decision = waits.release(before, token="tok-1", wait=token_wait(), now=NOW, republish=POLICY)
    after = decision.after
    assert after.status is RunStatus.CANCELLED
    assert after.lease is None
    assert after.due_at is None
    assert after.waiting is None
    assert after.failures == 0
    assert [e.type for e in decision.events] == [EventType.CANCELLED]
    assert decision.events[0].data == {"after": "released"}
    assert decision.fence == "tok-1"


def test_a_release_with_another_lease_token_is_refused() -> None:
    with pytest.raises(LeaseLost):
        waits.release(
            running("tok-1"), token="tok-2", wait=time_wait(NOW), now=NOW, republish=POLICY
        )


@pytest.mark.parametrize(
    "status", [RunStatus.QUEUED, RunStatus.RELEASED, RunStatus.SUCCEEDED, RunStatus.CANCELLED]
)
def test_a_release_of_a_run_that_is_not_leased_is_refused(status: RunStatus) -> None:
    run = running().with_changes(status=status)
    with pytest.raises(LeaseLost):
        waits.release(run, token="tok-1", wait=time_wait(NOW), now=NOW, republish=POLICY)


# resume -------------------------------------------------------------------------------


def test_resume_records_the_result_and_makes_the_run_runnable_now() -> None:
    wait = signal_wait()
    before = released(wait).with_changes(wait_results={"signal:earlier#1": {"status": "x"}})
    later = NOW + timedelta(minutes=7)
    decision = resume(before, wait, {"status": "received", "payload": {"ok": True}}, later)
    assert isinstance(decision, Transition)
    after = decision.after
    assert decision.fence is None
    assert after.status is RunStatus.QUEUED
    assert after.waiting is None
    assert after.due_at == later
    assert after.wake_at == later + POLICY.after
    assert after.publishes == 0
    assert after.wait_results == {
        "signal:earlier#1": {"status": "x"},
        wait.name: {"status": "received", "payload": {"ok": True}},
    }
    assert after.failures == 0
    assert decision.events == (
        RunEvent(
            seq=before.seq + 1,
            type=EventType.SIGNAL_RECEIVED,
            at=later,
            attempt=before.attempt,
            data={"key": "approved"},
        ),
    )
    assert_contiguous(decision)


def test_resume_clears_the_signal_timeout() -> None:
    wait = signal_wait(until=NOW + timedelta(minutes=30))
    decision = resume(released(wait), wait, {"status": "received", "payload": 1})
    assert isinstance(decision, Transition)
    assert decision.after.due_at == NOW
    assert decision.after.waiting is None


def test_resume_of_a_run_waiting_at_another_wait_is_skipped() -> None:
    run = released(signal_wait("approved"))
    other = Wait(WaitKind.SIGNAL, waits.wait_name(WaitKind.SIGNAL, "approved", 2), "approved")
    assert resume(run, other, {"status": "received"}) == Skip(SkipReason.NOT_DUE)


@pytest.mark.parametrize(
    "status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING, RunStatus.CANCEL_REQUESTED]
)
def test_resume_of_a_run_that_is_not_released_is_skipped(status: RunStatus) -> None:
    wait = signal_wait()
    run = released(wait).with_changes(status=status)
    assert resume(run, wait, {"status": "received"}) == Skip(SkipReason.NOT_DUE)


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_resume_of_a_finished_run_is_skipped(status: RunStatus) -> None:
    wait = signal_wait()
    run = released(wait).with_changes(status=status)
    assert resume(run, wait, {"status": "received"}) == Skip(SkipReason.TERMINAL)


def test_a_second_resume_at_the_same_wait_is_skipped() -> None:
    wait = signal_wait()
    first = resume(released(wait), wait, {"status": "received", "payload": 1})
    assert isinstance(first, Transition)
    assert resume(first.after, wait, {"status": "received", "payload": 2}) == Skip(
        SkipReason.NOT_DUE
    )


def test_resume_of_a_run_released_for_time_is_only_possible_at_its_wait() -> None:
    wait = time_wait(NOW + timedelta(hours=1))
    run = released(wait)
    assert isinstance(resume(run, wait, {"status": "x"}), Transition)
    assert resume(run, signal_wait(), {"status": "x"}) == Skip(SkipReason.NOT_DUE)


def test_a_completed_token_resumes_with_its_value_and_a_token_completed_event() -> None:
    token = core_tokens.decide(pending_token(), TokenStatus.COMPLETED, {"approved": True}, NOW)
    result, event, data = core_tokens.wait_result(token)
    assert result == {"status": "completed", "value": {"approved": True}}
    assert event is EventType.TOKEN_COMPLETED
    assert data == {"token": TOKEN_ID}
    wait = token_wait()
    decision = waits.resume(
        released(wait), wait=wait, result=result, event=event, data=data, now=NOW, republish=POLICY
    )
    assert isinstance(decision, Transition)
    assert [e.type for e in decision.events] == [EventType.TOKEN_COMPLETED]
    assert decision.after.wait_results[wait.name] == result


def test_a_timed_out_token_resumes_with_a_token_timed_out_event_and_no_value() -> None:
    token = core_tokens.decide(pending_token(), TokenStatus.TIMED_OUT, None, NOW)
    result, event, data = core_tokens.wait_result(token)
    assert result == {"status": "timed_out"}
    assert event is EventType.TOKEN_TIMED_OUT
    assert data == {"token": TOKEN_ID}


@pytest.mark.parametrize(
    ("status", "result", "failure"),
    [
        (RunStatus.SUCCEEDED, {"sum": 3}, None),
        (RunStatus.FAILED, None, BOOM),
        (RunStatus.CANCELLED, None, None),
    ],
)
def test_a_finished_run_resumes_its_waiters_with_its_outcome(
    status: RunStatus, result: JSON, failure: Failure | None
) -> None:
    child = queued().with_changes(id=OTHER_ID, status=status, result=result, failure=failure)
    resumption = in_memory_app().engine.resumer.run_finished(child)
    assert resumption.kind is WaitKind.RUN
    assert resumption.target == OTHER_ID
    assert resumption.event is EventType.RESUMED
    assert resumption.data == {"run": OTHER_ID, "status": status.value}
    assert resumption.result == {
        "run_id": OTHER_ID,
        "status": status.value,
        "result": result,
        "failure": failure.to_json() if failure else None,
    }
    wait = run_wait()
    decision = waits.resume(
        released(wait),
        wait=wait,
        result=resumption.result,
        event=resumption.event,
        data=resumption.data,
        now=NOW,
        republish=POLICY,
    )
    assert isinstance(decision, Transition)
    assert [e.type for e in decision.events] == [EventType.RESUMED]


# claim after a release ----------------------------------------------------------------


def test_a_signal_wait_past_its_timeout_records_wait_timed_out_then_started() -> None:
    timeout_at = NOW + timedelta(minutes=30)
    wait = signal_wait(until=timeout_at)
    run = released(wait)
    early = machine.claim_lease(
        run, now=timeout_at - timedelta(seconds=1), owner="w", token="t2", duration=LEASE
    )
    assert early == Skip(SkipReason.NOT_DUE)
    decision = claim(run, "tok-2", now=timeout_at)
    after = decision.after
    assert after.status is RunStatus.RUNNING
    assert after.attempt == 2
    assert after.waiting is None
    assert after.due_at is None
    assert after.wait_results == {wait.name: {"status": "timed_out"}}
    assert after.lease == Lease(owner="worker-a", token="tok-2", expires_at=timeout_at + LEASE)
    assert [(e.type, e.attempt) for e in decision.events] == [
        (EventType.WAIT_TIMED_OUT, 2),
        (EventType.STARTED, 2),
    ]
    assert decision.events[0].data == {"wait": wait.to_json()}
    assert_contiguous(decision)


def test_a_run_released_for_time_starts_again_at_its_due_time_with_no_wait_result() -> None:
    until = NOW + timedelta(hours=3)
    run = released(time_wait(until))
    assert machine.claim_lease(
        run, now=until - timedelta(milliseconds=1), owner="w", token="t", duration=LEASE
    ) == Skip(SkipReason.NOT_DUE)
    decision = claim(run, "tok-2", now=until)
    assert [e.type for e in decision.events] == [EventType.STARTED]
    assert decision.after.wait_results == {}
    assert decision.after.waiting is None
    assert decision.after.attempt == 2


def test_a_resumed_run_starts_with_its_wait_result_and_no_timeout_event() -> None:
    wait = signal_wait(until=NOW + timedelta(minutes=30))
    resumed = resume(released(wait), wait, {"status": "received", "payload": 5})
    assert isinstance(resumed, Transition)
    decision = claim(resumed.after, "tok-2")
    assert [e.type for e in decision.events] == [EventType.STARTED]
    assert decision.after.wait_results == {wait.name: {"status": "received", "payload": 5}}


@pytest.mark.parametrize(
    "wait", [signal_wait(), token_wait(), run_wait()], ids=["signal", "token", "run"]
)
def test_a_run_waiting_without_a_due_time_cannot_be_claimed(wait: Wait) -> None:
    run = released(wait)
    decision = machine.claim_lease(
        run, now=NOW + timedelta(days=30), owner="w", token="t", duration=LEASE
    )
    assert decision == Skip(SkipReason.NOT_DUE)


def test_cancelling_a_released_run_cancels_it_at_once_and_clears_the_wait() -> None:
    run = released(token_wait())
    decision = machine.request_cancel(run, now=NOW, actor="alice", reason="no longer needed")
    after = decision.after
    assert after.status is RunStatus.CANCELLED
    assert after.waiting is None
    assert after.due_at is None
    assert after.wake_at is None
    assert agenda_entry(after) is None
    assert [e.type for e in decision.events] == [EventType.CANCELLED]


# poll_later ---------------------------------------------------------------------------


def test_poll_later_backs_off_without_an_event() -> None:
    run = released(token_wait())
    later = NOW + timedelta(minutes=5)
    decision = waits.poll_later(run, now=later, policy=POLICY)
    assert isinstance(decision, Transition)
    assert decision.events == ()
    assert decision.guard == ("publishes",)
    assert decision.after.seq == run.seq
    assert decision.after.publishes == 1
    assert decision.after.wake_at == later + timedelta(minutes=10)
    again = waits.poll_later(decision.after, now=later, policy=POLICY)
    assert isinstance(again, Transition)
    assert again.after.wake_at == later + timedelta(minutes=20)


def test_poll_later_of_a_run_that_no_longer_waits_is_skipped() -> None:
    assert waits.poll_later(running(), now=NOW, policy=POLICY) == Skip(SkipReason.NOT_DUE)


# durable steps ------------------------------------------------------------------------


def test_record_step_appends_step_recorded_under_the_lease() -> None:
    before = running()
    decision = waits.record_step(
        before,
        token="tok-1",
        name="charge",
        value={"value": {"id": 7}, "site": "app.handler"},
        now=NOW,
    )
    after = decision.after
    assert decision.fence == "tok-1"
    assert after.status is RunStatus.RUNNING
    assert after.lease == before.lease
    assert after.steps == {"charge": {"value": {"id": 7}, "site": "app.handler"}}
    assert decision.events == (
        RunEvent(
            seq=before.seq + 1,
            type=EventType.STEP_RECORDED,
            at=NOW,
            attempt=1,
            data={"step": "charge"},
        ),
    )
    assert_contiguous(decision)


def test_record_step_keeps_earlier_steps() -> None:
    first = waits.record_step(
        running(), token="tok-1", name="a", value={"value": 1, "site": "s"}, now=NOW
    )
    second = waits.record_step(
        first.after, token="tok-1", name="b", value={"value": None, "site": "s"}, now=NOW
    )
    assert second.after.steps == {
        "a": {"value": 1, "site": "s"},
        "b": {"value": None, "site": "s"},
    }


def test_record_step_refuses_a_name_already_recorded() -> None:
    first = waits.record_step(
        running(), token="tok-1", name="a", value={"value": 1, "site": "s"}, now=NOW
    )
    with pytest.raises(IllegalTransition):
        waits.record_step(
            first.after, token="tok-1", name="a", value={"value": 2, "site": "s"}, now=NOW
        )


def test_record_step_with_another_lease_token_is_refused() -> None:
    with pytest.raises(LeaseLost):
        waits.record_step(
            running("tok-1"), token="tok-2", name="a", value={"value": 1, "site": "s"}, now=NOW
        )


def test_record_step_of_a_released_run_is_refused() -> None:
    run = released(time_wait(NOW))
    with pytest.raises(LeaseLost):
        waits.record_step(run, token="tok-1", name="a", value={"value": 1, "site": "s"}, now=NOW)


# retry counts failures, not attempts -------------------------------------------------------


def test_the_retry_policy_counts_failures_not_attempts() -> None:
    policy = RetryPolicy(max_attempts=2, delay=10, backoff="fixed")
    run = queued()
    for n in (1, 2):  # two attempts that each end in a release
        run = claim(run, f"tok-{n}", now=NOW).after
        run = waits.release(
            run, token=f"tok-{n}", wait=time_wait(NOW), now=NOW, republish=POLICY
        ).after
    run = claim(run, "tok-3", now=NOW).after
    assert (run.attempt, run.failures) == (3, 0)
    # what the worker does when attempt 3 raises: it counts the failure, not the attempt
    first_failure = machine.record_failure(
        run,
        token="tok-3",
        failure=BOOM,
        decision=policy.decide(run.failures + 1, NOW),
        now=NOW,
    ).after
    assert first_failure.status is RunStatus.RETRYING
    assert first_failure.failures == 1
    assert first_failure.due_at == NOW + timedelta(seconds=10)
    # had attempts been counted, the run would have failed already
    assert not policy.decide(run.attempt, NOW).will_retry

    run = claim(first_failure, "tok-4", now=NOW + timedelta(seconds=10)).after
    second_failure = machine.record_failure(
        run,
        token="tok-4",
        failure=BOOM,
        decision=policy.decide(run.failures + 1, NOW),
        now=NOW,
    )
    assert second_failure.after.status is RunStatus.FAILED
    assert second_failure.after.failures == 2
    assert second_failure.after.attempt == 4
    assert second_failure.events[-1].data == {"attempts": 4}


# tokens -------------------------------------------------------------------------------


def pending_token(timeout_at: datetime | None = None, metadata: JSON = None) -> Token:
    return core_tokens.new_token(TOKEN_ID, "test", NOW, timeout_at, metadata)


def test_a_new_token_is_pending_with_whole_millisecond_times() -> None:
    token = core_tokens.new_token(
        TOKEN_ID,
        "test",
        NOW.replace(microsecond=123_456),
        NOW + timedelta(hours=1, microseconds=999),
        {"for": "invoice-7"},
    )
    assert token.status is TokenStatus.PENDING
    assert not token.is_decided
    assert token.created_at == NOW.replace(microsecond=123_000)
    assert token.timeout_at == NOW + timedelta(hours=1)
    assert token.metadata == {"for": "invoice-7"}
    assert token.value is None
    assert token.decided_at is None
    assert token.resuming is False
    assert token.result == TokenResult(TokenStatus.PENDING, None)


def test_deciding_a_pending_token_completes_it_once() -> None:
    later = NOW + timedelta(minutes=3, microseconds=500)
    token = core_tokens.decide(pending_token(), TokenStatus.COMPLETED, {"ok": 1}, later)
    assert token.status is TokenStatus.COMPLETED
    assert token.is_decided
    assert token.value == {"ok": 1}
    assert token.decided_at == NOW + timedelta(minutes=3)
    assert token.resuming is True
    assert token.result == TokenResult(TokenStatus.COMPLETED, {"ok": 1})
    with pytest.raises(TokenAlreadyDecided) as raised:
        core_tokens.decide(token, TokenStatus.COMPLETED, {"ok": 2}, later)
    assert raised.value.token is token
    assert "already completed" in str(raised.value)
    with pytest.raises(TokenAlreadyDecided):
        core_tokens.decide(token, TokenStatus.TIMED_OUT, None, later)


def test_a_timed_out_token_keeps_no_value_and_cannot_be_completed() -> None:
    token = core_tokens.decide(pending_token(), TokenStatus.TIMED_OUT, {"ignored": 1}, NOW)
    assert token.status is TokenStatus.TIMED_OUT
    assert token.value is None
    assert token.result == TokenResult(TokenStatus.TIMED_OUT, None)
    with pytest.raises(TokenAlreadyDecided, match="already timed_out"):
        core_tokens.decide(token, TokenStatus.COMPLETED, 1, NOW)


def test_pending_is_not_a_decision() -> None:
    with pytest.raises(ValueError, match="completed or timed_out"):
        core_tokens.decide(pending_token(), TokenStatus.PENDING, None, NOW)


def test_a_pending_token_without_timeout_is_not_on_the_agenda() -> None:
    assert core_tokens.token_agenda_entry(pending_token()) is None


def test_a_pending_token_is_on_the_agenda_at_its_timeout() -> None:
    timeout_at = NOW + timedelta(hours=2)
    assert core_tokens.token_agenda_entry(pending_token(timeout_at)) == (
        AgendaKind.TOKEN,
        timeout_at,
    )


@pytest.mark.parametrize("status", [TokenStatus.COMPLETED, TokenStatus.TIMED_OUT])
def test_a_decided_token_is_on_the_agenda_while_it_resumes_and_off_after(
    status: TokenStatus,
) -> None:
    decided_at = NOW + timedelta(minutes=1)
    token = core_tokens.decide(pending_token(NOW + timedelta(hours=2)), status, 1, decided_at)
    assert core_tokens.token_agenda_entry(token) == (AgendaKind.TOKEN, decided_at)
    assert core_tokens.token_agenda_entry(replace(token, resuming=False)) is None
