"""Maintenance expires a lease only if the expiry it saw is still the stored one: a
heartbeat that lands between maintenance's read (the agenda index, a moment old) and
its write keeps the lease, so a live attempt never has its run handed to another worker.
Runs on every adapter of test_store_contract.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane_sqs import ConflictError, RunStatus
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.recovery import RecoverySettings, recover_lease
from runlane_sqs.core.retry import RetryPolicy
from tests.contract.store_backends import LEASE, Backend
from tests.contract.test_store_contract import _claim, _create


def expired_view(backend: Backend) -> tuple[Transition, str]:
    """A claimed run whose lease has run out, and maintenance's recovery decided on it."""
    claimed = _claim(backend, _create(backend))
    assert claimed.lease is not None
    backend.clock.advance(LEASE + timedelta(seconds=1))
    seen = backend.store.get_run(claimed.id)
    assert seen is not None
    decision = recover_lease(
        seen, now=backend.clock.now(), retry=RetryPolicy(), settings=RecoverySettings()
    )
    assert isinstance(decision, Transition)
    return decision, claimed.lease.token


def test_an_expired_lease_nobody_renewed_is_recovered(backend: Backend) -> None:
    decision, _ = expired_view(backend)

    recovered = backend.store.apply(decision)

    assert (recovered.status, recovered.lease) == (RunStatus.QUEUED, None)


def test_a_renewal_between_maintenances_read_and_write_keeps_the_lease(
    backend: Backend,
) -> None:
    decision, token = expired_view(backend)
    seen = decision.before
    renewal = machine.renew_lease(seen, token=token, now=backend.clock.now(), duration=LEASE)
    renewed = backend.store.renew_lease(seen, renewal)  # the heartbeat lands first

    with pytest.raises(ConflictError):
        backend.store.apply(decision)

    stored = backend.store.get_run(seen.id)
    assert stored is not None
    assert (stored.status, stored.lease) == (RunStatus.RUNNING, renewed.lease)


def test_a_cancel_request_is_not_finalized_under_a_renewed_lease(backend: Backend) -> None:
    claimed = _claim(backend, _create(backend))
    assert claimed.lease is not None
    requested = backend.store.apply(
        machine.request_cancel(claimed, now=backend.clock.now(), actor="op", reason="")
    )
    backend.clock.advance(LEASE + timedelta(seconds=1))
    decision = recover_lease(
        requested, now=backend.clock.now(), retry=RetryPolicy(), settings=RecoverySettings()
    )
    assert isinstance(decision, Transition)
    renewal = machine.renew_lease(
        requested, token=claimed.lease.token, now=backend.clock.now(), duration=LEASE
    )
    backend.store.renew_lease(requested, renewal)

    with pytest.raises(ConflictError):
        backend.store.apply(decision)

    stored = backend.store.get_run(claimed.id)
    assert stored is not None and stored.status is RunStatus.CANCEL_REQUESTED
