"""``RunStore.claim_hinted``: one write claims a run as its wakeup's hint describes it,
with the very result a read and a claim would have stored; a stale or forged hint is
refused with the stored run and changes nothing. Runs on every adapter of
test_store_contract.py (in memory, and DynamoDB over HTTP on the moto server or, in
``make test-aws-local``, DynamoDB Local)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from runlane_sqs import ConflictError, EventType, RunStatus
from runlane_sqs.core import machine, waits
from runlane_sqs.core.machine import HintedClaim, RepublishPolicy
from runlane_sqs.core.model import Run, Wait, WaitKind, new_lease_token, new_run_id
from runlane_sqs.core.wakeup import ClaimHint
from tests.contract.store_backends import LEASE, QUEUE, Backend
from tests.contract.test_store_contract import OTHER_TASK, _claim, _create


def hinted(
    backend: Backend, run: Run, hint: ClaimHint | None = None, **changes: object
) -> HintedClaim:
    claim = HintedClaim(
        environment=backend.environment,
        run_id=run.id,
        queue=QUEUE,
        hint=hint or ClaimHint(run.seq, run.attempt, run.task),
        owner="worker-a",
        token=new_lease_token(),
        now=backend.clock.now(),
        duration=LEASE,
        timeout=timedelta(minutes=5),
    )
    return replace(claim, **changes)  # type: ignore[arg-type]


def released_to(backend: Backend, wait: Wait) -> Run:
    """A run whose first attempt released it to ``wait`` (due now, for a time or timeout)."""
    claimed = _claim(backend, _create(backend))
    assert claimed.lease is not None
    released = backend.store.apply(
        waits.release(
            claimed,
            token=claimed.lease.token,
            wait=wait,
            now=backend.clock.now(),
            republish=RepublishPolicy(),
        )
    )
    assert released.status is RunStatus.RELEASED
    return released


def read_and_claim(backend: Backend, run: Run, claim: HintedClaim) -> Run:
    """What the worker stores when it reads the run and claims it (same token, same now)."""
    return backend.store.apply(claim.transition(run))


def test_a_hinted_claim_stores_what_a_read_and_a_claim_store(backend: Backend) -> None:
    by_hint = _create(backend, payload={"n": 1})
    by_read = _create(backend, payload={"n": 1})
    claim = hinted(backend, by_hint)

    claimed = backend.store.claim_hinted(claim)

    read = read_and_claim(backend, by_read, replace(claim, run_id=by_read.id))
    assert claimed == backend.store.get_run(by_hint.id)
    assert replace(claimed, id=by_read.id, created_at=by_read.created_at) == read
    assert (claimed.status, claimed.attempt, claimed.seq, claimed.payload) == (
        RunStatus.RUNNING,
        1,
        2,
        {"n": 1},
    )
    assert claimed.deadline_at is not None and claimed.lease is not None
    assert claimed.lease.token == claim.token
    events = backend.store.get_events(by_hint.id)
    assert [(e.seq, e.type, e.attempt, e.data) for e in events[1:]] == [
        (2, EventType.STARTED, 1, {"worker": "worker-a"})
    ]


def test_a_hinted_claim_of_a_run_released_until_a_time_ends_its_wait(backend: Backend) -> None:
    released = released_to(backend, Wait(WaitKind.TIME, "time#1", until=backend.clock.now()))

    again = backend.store.claim_hinted(hinted(backend, released))

    assert (again.status, again.attempt, again.waiting) == (RunStatus.RUNNING, 2, None)


@pytest.mark.parametrize(
    "stale",
    [
        {"seq": 2},
        {"attempt": 1},
        {"task": OTHER_TASK},
    ],
    ids=["seq", "attempt", "task"],
)
def test_a_hint_that_does_not_match_the_run_is_refused_with_the_stored_run(
    backend: Backend, stale: dict[str, object]
) -> None:
    run = _create(backend)
    hint = replace(ClaimHint(run.seq, run.attempt, run.task), **stale)  # type: ignore[arg-type]

    with pytest.raises(ConflictError) as caught:
        backend.store.claim_hinted(hinted(backend, run, hint))

    assert caught.value.current == run
    assert backend.store.get_run(run.id) == run
    assert len(backend.store.get_events(run.id)) == 1


def test_a_forged_hint_cannot_take_a_leased_run(backend: Backend) -> None:
    """The right sequence, attempt and task of a running run: still refused (not runnable)."""
    running = _claim(backend, _create(backend))

    with pytest.raises(ConflictError) as caught:
        backend.store.claim_hinted(hinted(backend, running))

    assert caught.value.current == running
    assert backend.store.get_run(running.id) == running


def test_a_hint_for_a_run_not_yet_due_is_refused(backend: Backend) -> None:
    run = _create(backend, due_in=60)

    with pytest.raises(ConflictError):
        backend.store.claim_hinted(hinted(backend, run))

    assert backend.store.get_run(run.id) == run


def test_a_hint_for_a_run_waiting_on_a_signal_is_refused(backend: Backend) -> None:
    """Its claim at the timeout must also record the timed-out wait: only a read decides it."""
    wait = Wait(WaitKind.SIGNAL, "signal:k#1", "k", until=backend.clock.now())
    released = released_to(backend, wait)

    with pytest.raises(ConflictError):
        backend.store.claim_hinted(hinted(backend, released))

    assert backend.store.get_run(released.id) == released


def test_a_hint_for_a_finished_run_is_refused(backend: Backend) -> None:
    claimed = _claim(backend, _create(backend))
    assert claimed.lease is not None
    done = backend.store.apply(
        machine.record_success(
            claimed, token=claimed.lease.token, result=1, now=backend.clock.now()
        )
    )

    with pytest.raises(ConflictError) as caught:
        backend.store.claim_hinted(hinted(backend, replace(done, status=RunStatus.QUEUED)))

    assert caught.value.current == done


def test_a_hint_for_a_missing_run_is_refused_with_no_current_run(backend: Backend) -> None:
    run = _create(backend)
    missing = replace(run, id=new_run_id())

    with pytest.raises(ConflictError) as caught:
        backend.store.claim_hinted(hinted(backend, missing))

    assert caught.value.current is None
    assert backend.store.get_run(missing.id) is None


def test_of_two_workers_with_the_same_hint_one_claims(backend: Backend) -> None:
    run = _create(backend)
    first = backend.store.claim_hinted(hinted(backend, run))

    with pytest.raises(ConflictError) as caught:
        backend.store.claim_hinted(hinted(backend, run, owner="worker-b"))

    assert caught.value.current == first
    assert backend.store.get_run(run.id) == first
