"""Parking decisions: a run whose task the receiving worker does not register is left
for redelivery until ``park_after`` receives, then parked with nothing else changed;
unparking returns it to the runnable status it had, its wait intact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core import machine
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConfigurationError, IllegalTransition
from runlane_sqs.core.machine import RepublishPolicy, Skip, SkipReason, Transition, agenda_entry
from runlane_sqs.core.model import JSON, EventType, Lease, Run, RunStatus, Wait, WaitKind
from runlane_sqs.core.parking import (
    park_diverged,
    park_unknown_task,
    parked_long_enough,
    unpark,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
POLICY = RepublishPolicy()


def queued(**changes: object) -> Run:
    run, _ = machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="test",
        task="elsewhere",
        queue="default",
        payload={"n": 1},
        now=NOW - timedelta(minutes=1),
    )
    return run.with_changes(created=False, **changes)


def park(run: Run, receives: int = 3) -> Transition | Skip | None:
    return park_unknown_task(run, now=NOW, worker="w1", receives=receives, park_after=3)


def parked(run: Run | None = None) -> Run:
    decision = park(run or queued())
    assert isinstance(decision, Transition)
    return decision.after


def test_a_wakeup_received_fewer_times_than_park_after_is_left_for_redelivery() -> None:
    assert park(queued(), receives=1) is None
    assert park(queued(), receives=2) is None


def test_the_third_receive_parks_the_run_and_takes_it_off_the_agenda() -> None:
    run = queued()
    decision = park(run, receives=3)

    assert isinstance(decision, Transition)
    after = decision.after
    assert (after.status, after.parked_from, after.wake_at) == (
        RunStatus.PARKED,
        RunStatus.QUEUED,
        None,
    )
    assert agenda_entry(after) is None  # maintenance no longer republishes it
    assert [(e.type, e.data) for e in decision.events] == [
        (EventType.PARKED, {"reason": "unknown_task", "worker": "w1", "receives": 3})
    ]
    assert decision.fence is None
    assert after.seq == run.seq + 1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"status": RunStatus.SUCCEEDED, "due_at": None}, SkipReason.TERMINAL),
        (
            {
                "status": RunStatus.RUNNING,
                "lease": Lease("w2", "tok", NOW + timedelta(minutes=1)),
            },
            SkipReason.LEASED,
        ),
        ({"due_at": NOW + timedelta(hours=1)}, SkipReason.NOT_DUE),
    ],
    ids=["finished", "leased", "not-due"],
)
def test_a_run_that_a_worker_knowing_the_task_would_not_run_is_not_parked(
    changes: dict[str, object], reason: SkipReason
) -> None:
    assert park(queued(**changes), receives=5) == Skip(reason)


def test_a_parked_run_is_not_parked_again() -> None:
    assert park(parked(), receives=5) == Skip(SkipReason.NOT_DUE)


def test_unparking_restores_the_status_and_wait_and_publishes_soon() -> None:
    wait = Wait(WaitKind.SIGNAL, "signal:k#1", "k", NOW - timedelta(seconds=5))
    released = queued(status=RunStatus.RELEASED, waiting=wait, due_at=wait.until)
    later = NOW + timedelta(hours=2)

    decision = unpark(parked(released), now=later, republish=POLICY, data={"by": "alice"})

    after = decision.after
    assert (after.status, after.waiting, after.parked_from, after.due_at) == (
        RunStatus.RELEASED,
        wait,
        None,
        wait.until,
    )
    assert after.wake_at == later + POLICY.after  # maintenance republishes a lost wakeup
    assert [(e.type, e.data) for e in decision.events] == [(EventType.UNPARKED, {"by": "alice"})]
    claim = machine.claim_lease(after, now=later, owner="w2", token="t", duration=POLICY.after)
    assert isinstance(claim, Transition)  # the next attempt may start at once


def test_only_a_parked_run_can_be_unparked() -> None:
    with pytest.raises(IllegalTransition, match="queued, not parked"):
        unpark(queued(), now=NOW, republish=POLICY, data={})


def test_cancelling_a_parked_run_ends_it() -> None:
    decision = machine.request_cancel(parked(), now=NOW, actor="alice", reason="obsolete")
    assert (decision.after.status, decision.after.parked_from) == (RunStatus.CANCELLED, None)


def test_maintenance_unparks_a_run_at_most_once_per_interval() -> None:
    run = parked()
    interval = timedelta(minutes=5)
    assert not parked_long_enough(run, now=NOW + timedelta(minutes=4), interval=interval)
    assert parked_long_enough(run, now=NOW + interval, interval=interval)
    assert not parked_long_enough(queued(), now=NOW + interval, interval=interval)


DIVERGENCE: dict[str, JSON] = {"reached": ["step a"], "asked": "step b", "unreached": ["wait x"]}


def leased(status: RunStatus = RunStatus.RUNNING) -> Run:
    claim = machine.claim_lease(
        queued(), now=NOW, owner="w1", token="tok-1", duration=timedelta(minutes=1)
    )
    assert isinstance(claim, Transition)
    return claim.after.with_changes(status=status)


def test_an_attempt_that_diverges_parks_the_run_until_an_operator_unparks_it() -> None:
    decision = park_diverged(leased(), token="tok-1", now=NOW, details=DIVERGENCE)
    after = decision.after
    assert (after.status, after.parked_reason, after.parked_from) == (
        RunStatus.PARKED,
        "history_diverged",
        RunStatus.RELEASED,
    )
    assert [(e.type, e.data) for e in decision.events] == [
        (EventType.PARKED, {"reason": "history_diverged", "worker": "w1", **DIVERGENCE})
    ]
    assert (decision.fence, after.lease) == ("tok-1", None)


def test_an_attempt_that_diverges_under_a_cancel_request_cancels_the_run() -> None:
    """The operator asked the run to stop: it ends, as every other outcome of such an
    attempt does, and the ``cancelled`` event records the divergence it met."""
    run = leased(RunStatus.CANCEL_REQUESTED)
    decision = park_diverged(run, token="tok-1", now=NOW, details=DIVERGENCE)
    after = decision.after
    assert (after.status, after.parked_reason, after.parked_from) == (
        RunStatus.CANCELLED,
        None,
        None,
    )
    assert (after.lease, after.due_at, after.wake_at, after.failures) == (None, None, None, 0)
    assert agenda_entry(after) is None
    assert [(e.type, e.data) for e in decision.events] == [
        (EventType.CANCELLED, {"after": "history_diverged", **DIVERGENCE})
    ]
    assert decision.fence == "tok-1"


@pytest.mark.parametrize("value", [0, -1, 2.5, "3"])
def test_park_after_receives_must_be_a_whole_number_of_at_least_one(value: object) -> None:
    with pytest.raises(ConfigurationError, match="park_after_receives"):
        RunlaneConfig(park_after_receives=value)  # type: ignore[arg-type]
