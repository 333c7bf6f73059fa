"""Holding a republish back while the run's wakeup only waits in its queue's line
(core/recovery.py: ``line_position``, ``plan_publish`` with a ``QueueLine``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.machine import RepublishPolicy, Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.recovery import QueueLine, is_held, line_position, plan_publish

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
POLICY = RepublishPolicy()  # trusted 5 minutes, doubling, at most an hour
NEVER_DRAINED = QueueLine(drained_at=None)


def triggered(at: datetime = T0, due_at: datetime | None = None) -> Run:
    """A run whose wakeup was published with its creation (``wake_at`` set)."""
    run, _ = machine.new_run(
        run_id="fedcba9876543210fedcba9876543210",
        environment="test",
        task="work",
        queue="default",
        payload=None,
        now=at,
        due_at=due_at,
        republish=POLICY,
    )
    return run.with_changes(created=False)


def decide(run: Run, now: datetime, line: QueueLine | None) -> Transition:
    decision = plan_publish(run, now=now, policy=POLICY, line=line)
    assert isinstance(decision, Transition), decision
    return decision


def test_the_line_position_is_when_the_wakeup_became_visible() -> None:
    assert line_position(triggered(), POLICY) == T0
    delayed = triggered(due_at=T0 + timedelta(minutes=3))
    assert line_position(delayed, POLICY) == T0 + timedelta(minutes=3)
    # republished by maintenance at T0 + 5 min, then at T0 + 10 min
    once = decide(triggered(), T0 + POLICY.after, None).after
    assert line_position(once, POLICY) == T0 + POLICY.after
    twice = decide(once, once.wake_at, None).after  # type: ignore[arg-type]
    assert line_position(twice, POLICY) == once.wake_at


def test_without_a_known_line_the_run_is_republished_as_before() -> None:
    decision = decide(triggered(), T0 + POLICY.after, None)
    assert not is_held(decision) and decision.after.publishes == 1


def test_a_wakeup_the_line_has_not_reached_is_held_back() -> None:
    now = T0 + POLICY.after
    decision = decide(triggered(), now, NEVER_DRAINED)
    assert is_held(decision)
    assert decision.events == () and decision.after.seq == decision.before.seq
    assert decision.after.line_at == T0  # its place in line is kept
    assert decision.after.wake_at == now + POLICY.after and decision.after.publishes == 1
    drained_before = QueueLine(drained_at=T0 - timedelta(seconds=1))
    assert is_held(decide(triggered(), now, drained_before))


def test_a_wakeup_the_line_has_passed_is_lost_and_republished() -> None:
    drained = QueueLine(drained_at=T0 + timedelta(minutes=2))
    decision = decide(triggered(), T0 + POLICY.after, drained)
    assert not is_held(decision)
    assert decision.after.line_at is None and decision.after.wake_at == T0 + 2 * POLICY.after


def test_a_held_run_keeps_its_place_and_backs_off_until_the_line_reaches_it() -> None:
    held = decide(triggered(), T0 + POLICY.after, NEVER_DRAINED).after
    assert held.wake_at is not None
    again = decide(held, held.wake_at, NEVER_DRAINED).after
    assert again.line_at == T0 and again.wake_at == held.wake_at + 2 * POLICY.after
    assert again.wake_at is not None
    reached = QueueLine(drained_at=T0 + timedelta(minutes=20))
    published = decide(again, again.wake_at, reached)
    assert not is_held(published) and published.after.line_at is None


def test_a_wakeup_waiting_longer_than_republish_max_is_republished_anyway() -> None:
    """A queue never seen drained (nobody consumes, or it is always busy): the run is
    listed no later than ``max_after`` past its wakeup, then republished."""
    run = triggered()
    while True:
        assert run.wake_at is not None and run.wake_at <= T0 + POLICY.max_after
        decision = decide(run, run.wake_at, NEVER_DRAINED)
        if not is_held(decision):
            break
        run = decision.after
    assert run.wake_at == T0 + POLICY.max_after
    assert decision.after.line_at is None


def test_any_state_change_forgets_the_held_place() -> None:
    held = decide(triggered(), T0 + POLICY.after, NEVER_DRAINED).after
    claimed = machine.claim_lease(
        held, now=T0 + POLICY.after, owner="w", token="t", duration=timedelta(seconds=60)
    )
    assert isinstance(claimed, Transition) and claimed.after.line_at is None
