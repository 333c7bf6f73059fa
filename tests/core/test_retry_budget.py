"""The per-message path's retry budget above botocore's retries: 10 s for reads, claims
and unfenced writes; a write fenced on a lease stops one second before the lease
expires, and gets no retry at all when that is already past."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.runtime.budget import DEFAULT_BUDGET, write_budget

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def queued() -> Run:
    run, _ = machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="test",
        task="work",
        queue="default",
        payload=None,
        now=NOW,
    )
    return run.with_changes(created=False)


def claimed(lease_seconds: float) -> Transition:
    decision = machine.claim_lease(
        queued(), now=NOW, owner="w1", token="tok", duration=timedelta(seconds=lease_seconds)
    )
    assert isinstance(decision, Transition)
    return decision


def success(lease_seconds: float) -> Transition:
    return machine.record_success(claimed(lease_seconds).after, token="tok", result=1, now=NOW)


def test_a_claim_and_an_unfenced_write_get_the_default_budget() -> None:
    assert write_budget(claimed(60), NOW) == DEFAULT_BUDGET
    cancel = machine.request_cancel(queued(), now=NOW, actor="a", reason="")
    assert write_budget(cancel, NOW) == DEFAULT_BUDGET


def test_a_fenced_write_stops_retrying_a_second_before_its_lease_expires() -> None:
    assert write_budget(success(60), NOW) == DEFAULT_BUDGET  # 59 s left: the default
    assert write_budget(success(60), NOW + timedelta(seconds=55)) == timedelta(seconds=4)
    assert write_budget(success(60), NOW + timedelta(seconds=59.5)) == timedelta(0)
    assert write_budget(success(60), NOW + timedelta(minutes=5)) == timedelta(0)
