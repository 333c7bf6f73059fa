"""The claim a wakeup's hint allows: which runs get a hint, when its condition holds, and
that the claim written without a read sets what a claim after a read sets."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core import machine
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Run, RunStatus, Wait, WaitKind
from runlane_sqs.core.wakeup import ClaimHint

NOW = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def queued() -> Run:
    run, _ = machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="prod",
        task="billing.charge",
        queue="default",
        payload={"n": 1},
        now=NOW,
    )
    return replace(run, created=False)


def claim_of(run: Run, **changes: object) -> HintedClaim:
    hint = ClaimHint.of(run)
    assert hint is not None
    claim = HintedClaim(
        environment=run.environment,
        run_id=run.id,
        queue=run.queue,
        hint=hint,
        owner="w1",
        token="tok",
        now=NOW + timedelta(seconds=1),
        duration=LEASE,
        timeout=timedelta(minutes=5),
    )
    return replace(claim, **changes)  # type: ignore[arg-type]


def test_a_runnable_run_gets_a_hint_of_its_sequence_attempt_and_task() -> None:
    assert ClaimHint.of(queued()) == ClaimHint(seq=1, attempt=0, task="billing.charge")


@pytest.mark.parametrize(
    "changes",
    [
        {"status": RunStatus.RUNNING},
        {"status": RunStatus.SUCCEEDED},
        {"status": RunStatus.PARKED},
        {"status": RunStatus.RELEASED, "waiting": Wait(WaitKind.SIGNAL, "signal:k#1", "k")},
        {"status": RunStatus.RELEASED, "waiting": Wait(WaitKind.TOKEN, "token:t#1", "t")},
    ],
    ids=["running", "succeeded", "parked", "signal-wait", "token-wait"],
)
def test_a_run_a_read_must_decide_on_gets_no_hint(changes: dict[str, object]) -> None:
    assert ClaimHint.of(replace(queued(), **changes)) is None  # type: ignore[arg-type]


def test_a_time_release_gets_a_hint() -> None:
    released = replace(
        queued(), status=RunStatus.RELEASED, waiting=Wait(WaitKind.TIME, "time#1", until=NOW)
    )
    assert ClaimHint.of(released) is not None


@pytest.mark.parametrize(
    "changes",
    [
        {"seq": 2},
        {"attempt": 1},
        {"task": "other"},
        {"status": RunStatus.RUNNING},
        {"due_at": NOW + timedelta(hours=1)},
        {"due_at": None},
        {"status": RunStatus.RELEASED, "waiting": Wait(WaitKind.SIGNAL, "signal:k#1", "k")},
    ],
    ids=["seq", "attempt", "task", "leased", "not-due", "no-due-time", "signal-wait"],
)
def test_the_condition_fails_on_any_run_but_the_hinted_one(changes: dict[str, object]) -> None:
    run = queued()
    claim = claim_of(run)

    assert claim.holds(run)
    assert not claim.holds(replace(run, **changes))  # type: ignore[arg-type]


def test_the_blind_claim_sets_what_the_claim_on_the_stored_run_sets() -> None:
    run = replace(queued(), wake_at=NOW + timedelta(minutes=5), publishes=2)
    claim = claim_of(run)

    blind, read = claim.blind(), claim.transition(run)

    assert isinstance(read, Transition) and blind.events == read.events
    written = (
        "status",
        "seq",
        "attempt",
        "updated_at",
        "due_at",
        "lease",
        "deadline_at",
        "wake_at",
        "publishes",
        "waiting",
    )
    for name in written:
        assert getattr(blind.after, name) == getattr(read.after, name), name
    assert {f.name for f in fields(Run)} >= set(written)
