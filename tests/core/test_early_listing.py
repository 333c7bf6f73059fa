"""A run whose wakeup is published at once is listed on the agenda at its due time plus
the lease duration (``review_at``), so the claim on its wakeup's hint leaves its agenda
entry where it is; maintenance lists it at its agenda time when it looks and finds
nothing to do (docs/design/storage.md, "Indexes")."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane_sqs.adapters.dynamodb import runs
from runlane_sqs.core import machine
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.machine import (
    HintedClaim,
    RepublishPolicy,
    agenda_entry,
    eager_review_at,
    listed_at,
)
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.recovery import plan_publish, relist
from runlane_sqs.core.retry import RetryDecision
from runlane_sqs.core.wakeup import ClaimHint, MalformedWakeup, Wakeup, parse_wakeup
from tests.core.test_claims import claim_of
from tests.core.test_codec import FAILURE, Update

NOW = datetime(2030, 1, 1, 12, 0, 0, 123_000, tzinfo=UTC)
LEASE = timedelta(seconds=60)
POLICY = RepublishPolicy(after=timedelta(minutes=5), review_after=LEASE)
RUN_ID = "0123456789abcdef0123456789abcdef"


def published(due_in: timedelta = timedelta(0), policy: RepublishPolicy = POLICY) -> Run:
    run, _ = machine.new_run(
        run_id=RUN_ID,
        environment="prod",
        task="billing.charge",
        queue="default",
        payload=None,
        now=NOW,
        due_at=NOW + due_in,
        republish=policy,
    )
    return replace(run, created=False)


def hinted_claim(run: Run, **changes: Any) -> HintedClaim:
    """The claim of a worker with the app's lease and no task timeout, a second after the
    run is due."""
    assert run.due_at is not None
    defaults = {"now": run.due_at + timedelta(seconds=1), "duration": LEASE, "timeout": None}
    return claim_of(run, **{**defaults, **changes})


# --- where a run is listed --------------------------------------------------------------


def test_a_published_run_is_listed_at_its_due_time_plus_the_lease_duration() -> None:
    run = published()
    assert agenda_entry(run) == (AgendaKind.RUN, NOW + POLICY.after)
    assert run.review_at == NOW + LEASE
    assert listed_at(run) == NOW + LEASE
    assert runs.run_to_wire(run, [], "null")["agenda_at"] == {"N": str(to_epoch_ms(NOW + LEASE))}


def test_a_delayed_run_is_listed_a_lease_duration_past_its_due_time() -> None:
    run = published(due_in=timedelta(minutes=10))
    assert run.review_at == NOW + timedelta(minutes=10) + LEASE


@pytest.mark.parametrize(
    ("policy", "due_in"),
    [
        (RepublishPolicy(after=timedelta(minutes=5)), timedelta(0)),  # no review_after
        (RepublishPolicy(after=timedelta(seconds=30), review_after=LEASE), timedelta(0)),
        (POLICY, timedelta(hours=1)),  # beyond SQS's delay: maintenance publishes it
    ],
    ids=["no review", "republish sooner than the lease", "published later"],
)
def test_no_early_listing_when_it_would_not_be_earlier(
    policy: RepublishPolicy, due_in: timedelta
) -> None:
    run = published(due_in, policy)
    assert run.review_at is None
    assert eager_review_at(NOW + due_in, NOW, policy) is None
    assert listed_at(run) == agenda_entry(run)[1]  # type: ignore[index]


def test_the_early_listing_survives_the_wire_only_while_it_is_earlier() -> None:
    run = published()
    assert runs.run_from_wire(runs.run_to_wire(run, [], "null")).review_at == NOW + LEASE
    plain = replace(run, review_at=None)
    assert runs.run_from_wire(runs.run_to_wire(plain, [], "null")).review_at is None


def test_every_state_change_ends_the_early_listing() -> None:
    claimed = machine.claim_lease(published(), now=NOW, owner="w", token="tok", duration=LEASE)
    assert isinstance(claimed, machine.Transition)
    assert claimed.after.review_at is None
    assert listed_at(claimed.after) == NOW + LEASE  # the lease expiry


def test_a_retry_published_at_once_is_listed_early_again() -> None:
    claimed = machine.claim_lease(published(), now=NOW, owner="w", token="tok", duration=LEASE)
    assert isinstance(claimed, machine.Transition)
    retry_at = NOW + timedelta(seconds=30)
    retried = machine.record_failure(
        claimed.after,
        token="tok",
        failure=FAILURE,
        decision=RetryDecision(retry_at),
        now=NOW,
        republish=POLICY,
    )
    assert retried.after.status is RunStatus.RETRYING
    assert retried.after.review_at == retry_at + LEASE


def test_a_maintenance_publish_lists_the_run_at_its_next_wake() -> None:
    run = published()
    decision = plan_publish(run, now=NOW + POLICY.after, policy=POLICY)
    assert isinstance(decision, machine.Transition)
    assert decision.after.review_at is None
    assert listed_at(decision.after) == decision.after.wake_at


# --- the claim leaves the listing --------------------------------------------------------


def test_the_hint_carries_the_early_listing() -> None:
    run = published()
    hint = ClaimHint.of(run)
    assert hint is not None and hint.review_at == NOW + LEASE
    body = Wakeup.for_run(run, NOW).to_json()
    assert parse_wakeup(body).hint == hint


def test_a_claim_within_the_lease_keeps_the_listing_and_requires_it() -> None:
    claim = hinted_claim(published())
    assert claim.keeps_listing()
    update = Update(runs.claim_hinted("runs", claim))
    assert "agenda_at" not in update.set and "agenda_pk" not in update.set
    assert update.required["agenda_at"] == to_epoch_ms(NOW + LEASE)
    assert update.set["status"] == "running"


@pytest.mark.parametrize(
    "changes",
    [
        {"duration": timedelta(seconds=30)},  # this worker's lease ends before the listing
        {"timeout": timedelta(seconds=10)},  # the attempt's deadline comes first
    ],
    ids=["shorter lease", "earlier deadline"],
)
def test_a_claim_that_would_outlive_its_listing_moves_it(changes: dict[str, Any]) -> None:
    claim = hinted_claim(published(), **changes)
    assert not claim.keeps_listing()
    update = Update(runs.claim_hinted("runs", claim))
    assert update.set["agenda_at"] == to_epoch_ms(listed_at(claim.blind().after))  # type: ignore[arg-type]
    assert "agenda_at" not in update.required


def test_a_claim_without_an_early_listing_moves_the_entry() -> None:
    claim = hinted_claim(published(policy=RepublishPolicy()))
    assert not claim.keeps_listing()
    assert "agenda_at" in Update(runs.claim_hinted("runs", claim)).set


def test_the_claim_holds_only_on_a_run_still_listed_as_hinted() -> None:
    run = published()
    claim = hinted_claim(run)
    assert claim.holds(run)
    assert not claim.holds(replace(run, review_at=None))  # maintenance listed it later


# --- maintenance lists a run it looked at early --------------------------------------


def test_a_run_looked_at_early_is_listed_at_its_agenda_time() -> None:
    run = published()
    decision = relist(run)
    assert decision is not None
    assert decision.events == () and decision.after.seq == run.seq
    update = Update(runs.apply_transition("runs", decision))
    assert update.set["agenda_at"] == to_epoch_ms(NOW + POLICY.after)
    assert update.required["seq"] == run.seq


def test_a_run_listed_at_its_agenda_time_is_not_listed_again() -> None:
    assert relist(replace(published(), review_at=None)) is None


# --- a hint's time is checked like the rest of the wakeup ---------------------------------


def body_with_at(at: object) -> str:
    body = json.loads(Wakeup.for_run(published(), NOW).to_json())
    body["hint"]["at"] = at
    return json.dumps(body)


@pytest.mark.parametrize("at", [None, -1, 1.5, "1893499200000", True, 10**15, [1]])
def test_a_hint_with_a_bad_time_is_malformed(at: object) -> None:
    with pytest.raises(MalformedWakeup, match="hint at"):
        parse_wakeup(body_with_at(at))


def test_a_hint_time_is_epoch_milliseconds() -> None:
    hint = parse_wakeup(body_with_at(to_epoch_ms(NOW))).hint
    assert hint is not None and hint.review_at == NOW
