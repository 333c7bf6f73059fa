"""The per-message path's retry budget above botocore's retries: 10 s for reads, claims
and unfenced writes; a write fenced on a lease stops one second before the lease
expires, and gets no retry at all when that is already past. A request is called again
only after it failed as unavailable, at most four times, backing off between calls."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from tenacity import RetryCallState, wait_exponential
from tenacity.wait import wait_base

from runlane_sqs.core import machine
from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.runtime import budget
from runlane_sqs.runtime.aio.executor import retried_async
from runlane_sqs.runtime.budget import DEFAULT_BUDGET, MAX_TRIES, write_budget
from runlane_sqs.runtime.executor import retried

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


class Flaky:
    """A request failing as unavailable ``failures`` times, then answering its argument."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or StorageUnavailable("throttled")
        self.calls = 0

    def __call__(self, argument: str) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return argument.upper()

    async def call_async(self, argument: str) -> str:
        return self(argument)


class RecordedBackoff(wait_base):
    """The budget's backoff, recorded rather than waited."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, retry_state: RetryCallState) -> float:
        self.waits.append(wait_exponential(multiplier=0.2, max=5)(retry_state))
        return 0.0


@pytest.fixture
def backoff(monkeypatch: pytest.MonkeyPatch) -> RecordedBackoff:
    recorded = RecordedBackoff()
    monkeypatch.setattr(budget, "BACKOFF", recorded)
    return recorded


def call(mode: str, request: Flaky, budget_time: timedelta = DEFAULT_BUDGET) -> str:
    if mode == "sync":
        return retried(request, "run", lambda: budget_time)
    return asyncio.run(retried_async(request.call_async, "run", lambda: budget_time))


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@MODES
def test_a_request_that_answers_is_called_once(mode: str, backoff: RecordedBackoff) -> None:
    request = Flaky(failures=0)
    assert call(mode, request) == "RUN"
    assert request.calls == 1
    assert backoff.waits == []


@MODES
def test_an_unavailable_store_is_called_again_after_a_growing_wait(
    mode: str, backoff: RecordedBackoff
) -> None:
    request = Flaky(failures=2)
    assert call(mode, request) == "RUN"
    assert request.calls == 3
    assert backoff.waits == [0.2, 0.4]


@MODES
def test_the_tries_stop_at_the_maximum_and_the_last_failure_is_raised(
    mode: str, backoff: RecordedBackoff
) -> None:
    request = Flaky(failures=10)
    with pytest.raises(StorageUnavailable, match="throttled"):
        call(mode, request)
    assert request.calls == MAX_TRIES


@MODES
def test_a_spent_budget_gets_one_try(mode: str, backoff: RecordedBackoff) -> None:
    request = Flaky(failures=1)
    with pytest.raises(StorageUnavailable):
        call(mode, request, timedelta(0))
    assert request.calls == 1


@MODES
def test_the_first_call_counts_against_the_budget(
    mode: str, backoff: RecordedBackoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first call that took longer than the budget (a slow timeout) is not retried."""
    monkeypatch.setattr("runlane_sqs.runtime.executor.monotonic", lambda: 0.0)
    monkeypatch.setattr("runlane_sqs.runtime.aio.executor.monotonic", lambda: 0.0)
    monkeypatch.setattr(budget, "monotonic", lambda: DEFAULT_BUDGET.total_seconds() + 1)
    request = Flaky(failures=1)
    with pytest.raises(StorageUnavailable):
        call(mode, request)
    assert request.calls == 1


@MODES
def test_other_errors_are_not_retried(mode: str, backoff: RecordedBackoff) -> None:
    request = Flaky(failures=1, error=ValueError("bad key"))
    with pytest.raises(ValueError, match="bad key"):
        call(mode, request)
    assert request.calls == 1
