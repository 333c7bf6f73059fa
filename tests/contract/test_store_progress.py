"""The store's report of an attempt's progress and state (``report_progress``), held to
the same contract on every backend: the in-memory DynamoDB and the emulators
(docs/progress.md, "Stale attempts"). A report is written with no event and no change
of ``seq``, fenced on the attempt's lease token like a heartbeat; the last one rides on
the outcome's own write."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane_sqs import LeaseLost, RunStatus
from runlane_sqs.core import machine
from runlane_sqs.core.progress import AttemptReport, checked_progress, with_report
from runlane_sqs.core.recovery import expire_lease
from tests.contract.store_backends import LEASE, Backend
from tests.contract.test_store_contract import _claim, _create, _token


def _progress(backend: Backend, done: int, attempt: int = 1) -> AttemptReport:
    return AttemptReport(
        progress=checked_progress(done, 10, f"at {done}", attempt=attempt, now=backend.clock.now())
    )


def test_a_report_is_written_under_the_lease_with_no_event(backend: Backend) -> None:
    claimed = _claim(backend, _create(backend))

    stored = backend.store.report_progress(
        claimed, _token(claimed), _progress(backend, 3).then(AttemptReport(state={"page": 3}))
    )

    assert stored.progress is not None and (stored.progress.done, stored.progress.total) == (3, 10)
    assert stored.state == {"page": 3}
    assert (stored.seq, stored.status, stored.lease) == (
        claimed.seq,
        RunStatus.RUNNING,
        claimed.lease,
    )
    assert len(backend.store.get_events(claimed.id)) == 2  # triggered, started: no more
    cleared = backend.store.report_progress(claimed, _token(claimed), AttemptReport(state=None))
    assert cleared.state is None and cleared.progress == stored.progress


def test_a_report_of_a_stale_attempt_is_refused(backend: Backend) -> None:
    run = _create(backend)
    first = _claim(backend, run)
    backend.clock.advance(LEASE + timedelta(seconds=1))
    expired = expire_lease(backend.store.get_run(run.id), now=backend.clock.now())
    assert isinstance(expired, machine.Transition)
    backend.store.apply(expired)
    second = _claim(backend, backend.store.get_run(run.id), owner="worker-b")

    with pytest.raises(LeaseLost):
        backend.store.report_progress(first, _token(first), _progress(backend, 9))

    assert backend.store.get_run(run.id) == second


def test_a_report_after_the_outcome_is_refused_and_the_outcome_keeps_the_last(
    backend: Backend,
) -> None:
    claimed = _claim(backend, _create(backend))
    token = _token(claimed)
    backend.store.report_progress(claimed, token, _progress(backend, 4))
    outcome = machine.record_success(claimed, token=token, result=1, now=backend.clock.now())

    done = backend.store.apply(with_report(outcome, _progress(backend, 10)))

    assert done.status is RunStatus.SUCCEEDED
    assert done.progress is not None and done.progress.done == 10
    with pytest.raises(LeaseLost):
        backend.store.report_progress(claimed, token, _progress(backend, 5))
    stored = backend.store.get_run(claimed.id)
    assert stored is not None and stored.progress is not None and stored.progress.done == 10
