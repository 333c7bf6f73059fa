"""A run whose wakeup was published at once is listed on the agenda at its due time plus
the lease duration; the claim on the wakeup leaves it there, and heartbeats do not move
it. Maintenance looks at the run then and lists it at its agenda time when there is
nothing to do yet: a wakeup still trusted, a lease still alive. Nothing is published or
recovered early, and nothing is missed (docs/design/storage.md, "Indexes")."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.indexes import AGENDA_SHARDS
from runlane_sqs.core.machine import listed_at
from runlane_sqs.core.model import Lease
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.engine.reports import JOB_DUE, JOB_EXPIRED
from tests.apps.recovery_tasks import PLAIN_TASK, register_recovery
from tests.backends import Backend
from tests.behaviour.maintenance_support import take_wakeups
from tests.behaviour.worker_support import event_types
from tests.core.test_claims import claim_of


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register_recovery)


def claim_on_hint(app: Runlane, run_id: str, token: str) -> None:
    """Claim as a worker that received the run's wakeup would, then stops heartbeating."""
    run = app.runs.get(run_id)
    assert run.review_at is not None
    claim = claim_of(
        run,
        owner="worker-1",
        token=token,
        now=app.clock.now(),
        duration=app.config.lease_duration,
        timeout=None,
    )
    assert claim.keeps_listing()
    app.store.claim_hinted(claim)


def test_a_run_still_queued_at_its_first_look_is_listed_at_its_wake_time(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    assert take_wakeups(app) == Counter({run.id: 1})  # its eager wakeup, in a backlog
    assert run.review_at == run.created_at + app.config.lease_duration

    clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].examined == 1
    assert report.jobs[JOB_DUE].acted == 0  # the wakeup is still trusted
    assert take_wakeups(app) == Counter()
    stored = app.runs.get(run.id)
    assert stored.review_at is None
    assert listed_at(stored) == run.wake_at

    assert app.maintenance.run_pass().jobs[JOB_DUE].examined == 0  # not listed before then
    clock.advance(app.config.republish_after)
    assert app.maintenance.run_pass().jobs[JOB_DUE].published == 1
    assert take_wakeups(app) == Counter({run.id: 1})


def test_the_claim_leaves_the_listing_and_an_expired_lease_is_still_recovered(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    take_wakeups(app)
    clock.advance(timedelta(seconds=1))
    claim_on_hint(app, run.id, "tok-1")
    claimed = app.runs.get(run.id)
    assert claimed.status is RunStatus.RUNNING
    assert listed_at(claimed) == run.review_at  # listed where the trigger put it

    # at the first look the lease is still alive (it ends a second later): listed then
    clock.advance(app.config.lease_duration - timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].examined == 1
    assert report.jobs[JOB_EXPIRED].acted == 0
    assert listed_at(app.runs.get(run.id)) == claimed.lease.expires_at  # type: ignore[union-attr]

    clock.advance(timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].acted == 1
    assert app.runs.get(run.id).status is RunStatus.QUEUED
    assert event_types(app, run.id) == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
    ]


def test_a_heartbeat_does_not_move_the_listing_and_the_lease_it_extended_holds(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(PLAIN_TASK, {"n": 1})
    take_wakeups(app)
    claim_on_hint(app, run.id, "tok-1")
    claimed = app.runs.get(run.id)
    assert claimed.lease is not None
    clock.advance(app.config.lease_duration / 2)
    lease = Lease("worker-1", "tok-1", clock.now() + app.config.lease_duration)
    renewed = app.store.renew_lease(claimed, lease)
    assert listed_at(renewed) == run.review_at  # no agenda write

    clock.advance(app.config.lease_duration / 2)  # the first lease would end now
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 0  # the renewed lease is alive
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.RUNNING
    assert listed_at(stored) == renewed.lease.expires_at  # type: ignore[union-attr]


def test_a_pass_limit_below_one_candidate_per_partition_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=f"at least {AGENDA_SHARDS}"):
        MaintenanceConfig(limit_per_job=AGENDA_SHARDS - 1)
    with pytest.raises(ConfigurationError, match="max_lease_losses"):
        MaintenanceConfig(max_lease_losses=0)
