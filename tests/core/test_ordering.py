"""The ordering decisions (core/ordering.py): where a trigger places its run, which
writes leave a key's line, and waking the run whose turn came."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.adapters.dynamodb.runs import run_from_wire, run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.machine import RepublishPolicy, agenda_entry
from runlane_sqs.core.model import EventType, Run, RunStatus
from runlane_sqs.core.ordering import OrderHead, place, turn_passed, turn_reached

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = RepublishPolicy()


def new(key: str = "acct-1", head: OrderHead | None = None) -> Run:
    run, event = machine.new_run(
        run_id="a" * 32,
        environment="dev",
        task="ledger.post",
        queue="default",
        payload={},
        now=NOW,
        republish=POLICY,
    )
    placed, _, _ = place(run, event, key, head or OrderHead())
    return placed


def test_a_run_with_no_unfinished_run_before_it_holds_the_turn_at_once() -> None:
    run, event = machine.new_run(
        run_id="a" * 32, environment="dev", task="t", queue="q", payload={}, now=NOW
    )
    placed, first, where = place(run, event, "acct-1", OrderHead(next_place=7, unfinished=0))
    assert (placed.place, placed.turn_wait, placed.due_at) == (7, False, NOW)
    assert first.data == {"ordering_key": "acct-1", "place": 7}
    assert where.number == 7 and where.seen == OrderHead(7, 0)


def test_a_run_behind_unfinished_ones_waits_off_the_agenda() -> None:
    run = new(head=OrderHead(next_place=3, unfinished=2))
    assert run.turn_wait and run.due_at is None and run.wake_at is None
    assert agenda_entry(run) is None
    assert not run.is_due(NOW + timedelta(days=1))
    stored = run_from_wire(run_to_wire(run, [], "{}"))
    assert (stored.ordering_key, stored.place, stored.turn_wait) == ("acct-1", 3, True)


def test_only_a_write_that_ends_an_ordered_run_leaves_its_line() -> None:
    run = new()
    claim = machine.claim_lease(run, now=NOW, owner="w", token="t", duration=timedelta(seconds=60))
    assert isinstance(claim, machine.Transition)
    assert turn_passed(claim) is None
    success = machine.record_success(claim.after, token="t", result=None, now=NOW)
    assert turn_passed(success) == "acct-1"
    unordered = claim.after.with_changes(ordering_key=None, place=None)
    assert turn_passed(machine.record_success(unordered, token="t", result=None, now=NOW)) is None
    cancelled = machine.request_cancel(new(head=OrderHead(1, 1)), now=NOW, actor="a", reason="")
    assert cancelled.after.status is RunStatus.CANCELLED
    assert turn_passed(cancelled) == "acct-1"


def test_the_run_whose_turn_came_is_due_at_once_and_only_once() -> None:
    waiting = new(head=OrderHead(1, 1))
    woken = turn_reached(waiting, now=NOW, republish=POLICY)
    assert woken is not None
    assert (woken.after.turn_wait, woken.after.due_at) == (False, NOW)
    assert woken.after.wake_at == NOW + POLICY.after
    assert [e.type for e in woken.events] == [EventType.TURN_REACHED]
    assert turn_reached(woken.after, now=NOW, republish=POLICY) is None
    assert turn_reached(new(), now=NOW, republish=POLICY) is None  # it holds the turn
