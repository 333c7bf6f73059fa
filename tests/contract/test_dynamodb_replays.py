"""Recognizing our own write in the item a refused conditional write returns: the
same sequence, state and last events are ours (a resend after a lost response); any
difference is another writer's change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.adapters.dynamodb.codec import run_to_wire
from runlane_sqs.adapters.dynamodb.replays import landed_creation, landed_transition
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, RunEvent

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


def test_same_state_with_other_events_is_a_conflict() -> None:
    run, first = created()
    cancel_a = machine.request_cancel(run, now=NOW, actor="alice", reason="a")
    cancel_b = machine.request_cancel(run, now=NOW, actor="bob", reason="b")

    assert landed_transition(cancel_a, stored_after(cancel_b, first)) is None
    assert landed_transition(cancel_a, stored_after(cancel_a, first)) is not None


def test_no_item_is_no_landed_write() -> None:
    run, _ = created()
    assert landed_transition(claim(run), None) is None


def test_a_refused_creation_is_ours_only_if_the_stored_run_has_our_random_id() -> None:
    run, first = created()
    ours = run_to_wire(run, [first], '{"n":1}')
    other = run_to_wire(run.with_changes(id="f" * 32), [first], '{"n":1}')

    assert landed_creation(run, ours)
    assert not landed_creation(run, other)
    assert not landed_creation(run, None)
