"""Recognizing our own write in the item a refused conditional write returns: the
same sequence, state and last events are ours (a resend after a lost response); any
difference is another writer's change."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from runlane_sqs.adapters.dynamodb.replays import landed_creation, landed_transition
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.machine import RepublishPolicy, Transition
from runlane_sqs.core.model import Run, RunEvent, RunStatus
from runlane_sqs.core.rates import to_epoch_us, wait_for_rate
from runlane_sqs.core.recovery import RecoverySettings, expire_lease, recover_lease
from runlane_sqs.core.retry import RetryPolicy

NOW = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def created() -> tuple[Run, RunEvent]:
    return machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="test",
        task="work",
        queue="default",
        payload={"n": 1},
        now=NOW,
    )


def claim(run: Run, token: str = "tok-1") -> Transition:
    decision = machine.claim_lease(
        run.with_changes(created=False),
        now=NOW + timedelta(seconds=1),
        owner="w1",
        token=token,
        duration=timedelta(seconds=60),
    )
    assert isinstance(decision, Transition)
    return decision


def stored_after(transition: Transition, first: RunEvent) -> dict[str, object]:
    return run_to_wire(transition.after, [first, *transition.events], '{"n":1}')


def test_a_refusal_that_shows_our_claim_applied_returns_the_stored_run() -> None:
    run, first = created()
    ours = claim(run)

    landed = landed_transition(ours, stored_after(ours, first))

    assert landed is not None
    assert landed.lease == ours.after.lease and landed.seq == ours.after.seq


def test_another_workers_claim_at_the_same_sequence_is_a_conflict() -> None:
    run, first = created()
    theirs = claim(run, token="tok-2")

    assert landed_transition(claim(run), stored_after(theirs, first)) is None


def test_an_attempt_write_with_other_events_is_a_conflict() -> None:
    run, first = created()
    claimed = claim(run)
    ok = machine.record_success(claimed.after, token="tok-1", result=1, now=NOW)
    other = machine.record_success(claimed.after, token="tok-1", result=2, now=NOW)
    stored = [first, *claimed.events]

    assert landed_transition(ok, run_to_wire(ok.after, [*stored, *ok.events], "{}")) is not None
    assert landed_transition(ok, run_to_wire(other.after, [*stored, *other.events], "{}")) is None


def test_a_write_without_a_lease_token_is_never_taken_for_ours() -> None:
    """Two operators (or maintenance passes) can write the same state at the same
    millisecond: a resend of such a write stays a conflict."""
    run, first = created()
    cancel = machine.request_cancel(run, now=NOW, actor="alice", reason="a")

    assert landed_transition(cancel, stored_after(cancel, first)) is None


def test_no_item_is_no_landed_write() -> None:
    run, _ = created()
    assert landed_transition(claim(run), None) is None


def test_a_refused_creation_is_ours_only_if_the_stored_run_is_the_one_we_put() -> None:
    run, first = created()
    payload = '{"n":1}'
    ours = run_to_wire(run, [first], payload)
    other_id = run_to_wire(run.with_changes(id="f" * 32), [first], payload)
    other_payload = run_to_wire(run, [first], '{"n":2}')
    other_time = run_to_wire(
        run.with_changes(created_at=NOW + timedelta(seconds=1)), [first], payload
    )

    other_event = run_to_wire(run, [replace(first, data={"pass": "another"})], payload)

    assert landed_creation(run, first, payload, ours)
    assert not landed_creation(run, first, payload, other_id)
    assert not landed_creation(run, first, payload, other_payload)
    assert not landed_creation(run, first, payload, other_time)
    assert not landed_creation(run, first, payload, other_event)
    assert not landed_creation(run, first, payload, None)


def test_a_recovery_by_maintenance_fenced_on_the_lease_is_never_taken_for_ours() -> None:
    """Two passes can expire the same lease alike: the second stays a conflict."""
    run, first = created()
    claimed = claim(run)
    expired = expire_lease(claimed.after, now=NOW + timedelta(minutes=5))
    assert isinstance(expired, Transition) and expired.fence == "tok-1"
    stored = [first, *claimed.events, *expired.events]

    assert landed_transition(expired, run_to_wire(expired.after, stored, "{}")) is None


def test_a_claim_the_attempt_gave_back_unrun_is_recognized_as_its_own() -> None:
    """The give-back writes ``lease_expired`` like a recovery, but fenced on the
    attempt's own token: only that attempt can have written it."""
    run, first = created()
    claimed = claim(run)
    withdrawn = machine.withdraw_claim(
        claimed.after, token="tok-1", now=NOW + timedelta(seconds=40)
    )
    assert not withdrawn.recovery
    stored = [first, *claimed.events, *withdrawn.events]

    landed = landed_transition(withdrawn, run_to_wire(withdrawn.after, stored, "{}"))

    assert landed is not None and landed.lease is None and landed.seq == withdrawn.after.seq


def test_every_write_maintenance_fences_on_an_attempts_token_is_marked_a_recovery() -> None:
    run, _ = created()
    claimed = claim(run).after
    later = NOW + timedelta(minutes=5)
    settings = RecoverySettings()
    expired = expire_lease(claimed, now=later, settings=settings)
    lost = expire_lease(claimed.with_changes(lease_losses=2), now=later, settings=settings)
    cancelled = recover_lease(
        claimed.with_changes(status=RunStatus.CANCEL_REQUESTED),
        now=later,
        retry=RetryPolicy(),
        settings=settings,
    )
    timed_out = recover_lease(
        claimed.with_changes(deadline_at=NOW + timedelta(seconds=2)),
        now=later,
        retry=RetryPolicy(),
        settings=settings,
    )

    for transition in (expired, lost, cancelled, timed_out):
        assert isinstance(transition, Transition)
        assert transition.fence == "tok-1" and transition.recovery


def sleep_for_rate(run: Run, start: datetime) -> Transition:
    return wait_for_rate(
        run.with_changes(created=False),
        to_epoch_us(start),
        ["rate#task#work#1000000"],
        now=NOW,
        lead=timedelta(milliseconds=100),
        republish=RepublishPolicy(),
    )


def test_a_run_put_to_sleep_for_the_start_its_worker_reserved_is_recognized_as_its_own() -> None:
    """The start is the worker's own reservation: a resend of the write whose answer was
    lost carries on (holding or publishing the wakeup) instead of dropping it."""
    run, first = created()
    ours = sleep_for_rate(run, NOW + timedelta(seconds=30))

    landed = landed_transition(ours, stored_after(ours, first))

    assert landed is not None
    assert landed.rate_start == ours.after.rate_start and landed.seq == ours.after.seq


def test_another_workers_reserved_start_at_the_same_sequence_is_a_conflict() -> None:
    run, first = created()
    theirs = sleep_for_rate(run, NOW + timedelta(seconds=31))

    assert (
        landed_transition(
            sleep_for_rate(run, NOW + timedelta(seconds=30)), stored_after(theirs, first)
        )
        is None
    )
