"""A bulk operation whose process died is carried on by maintenance (docs/operations.md,
"Bulk recovery"), on every backend: a pass takes over an operation once its lease
expired, goes on from its last write and acts on no run twice; the process it took the
operation from, if it was only paused, is fenced (its next write is refused, and the
link or cancel it was making is not made twice); an operation completes however many
times the process carrying it dies; a live process renews its lease mid-page, so no pass
takes its operation; a pass out of time hands the operation back, and the next goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    BulkFilter,
    BulkOperation,
    EventType,
    ManualClock,
    OperationStatus,
    Runlane,
    RunStatus,
)
from runlane_sqs.core.bulk import LEASE, new_run_id_for
from runlane_sqs.core.model import Run
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.engine.reports import JOB_BULK, JobReport
from tests.backends import Backend
from tests.behaviour.operator_support import OTHER, Tasks, trigger
from tests.behaviour.test_bulk_operations import FAILED, Killed, all_runs, failed_runs, links

SLOW = 10
"""Runs a second at which a process acts on one run at a time (the steps below are then
exact)."""
FAST = 1000
"""Runs a second at which a process acts on several runs of a page at once."""


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


def bulk_job(app: Runlane) -> JobReport:
    return app.maintenance.run_pass().jobs[JOB_BULK]


def retried_once(app: Runlane, sources: list[Run], operation_id: str) -> None:
    """Each source linked exactly once, to the run this operation made of it, and no
    other run made."""
    for source in sources:
        assert [link["run"] for link in links(app, source.id)] == [
            new_run_id_for(operation_id, source.id)
        ]
    made = {r.id for r in all_runs(app)} - {s.id for s in sources}
    assert made == {new_run_id_for(operation_id, s.id) for s in sources}


def dies_after(calls: int, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, until the process dies at its ``calls``-th call (after it did its work)."""
    count, lock = {"n": 0}, threading.Lock()

    def call(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        with lock:
            count["n"] += 1
            if count["n"] == calls:
                raise Killed
        return made

    return call


def test_maintenance_takes_over_an_operation_whose_process_died_once_its_lease_expired(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = failed_runs(app, clock, 40)
    started = app.bulk.start("retry", FAILED, rate=FAST)
    monkeypatch.setattr(app.runs, "record_link", dies_after(33, app.runs.record_link))
    with pytest.raises(Killed):
        app.bulk.run(started.id, owner="process-1")
    monkeypatch.undo()
    assert app.bulk.get(started.id).owner == "process-1"

    held = bulk_job(app)  # its lease lasts: nothing listed yet

    assert (held.examined, held.acted) == (0, 0)
    assert app.bulk.get(started.id).owner == "process-1"
    clock.advance(LEASE)

    job = bulk_job(app)

    assert (job.examined, job.acted) == (1, 1)
    done = app.bulk.get(started.id)
    assert done.status is OperationStatus.DONE and done.owner is None
    assert (done.tally.acted, done.tally.skipped, done.tally.failed) == (40, 0, 0)
    retried_once(app, sources, started.id)
    assert bulk_job(app).examined == 0  # done: off the agenda


def test_a_paused_process_is_fenced_once_maintenance_took_its_operation_over(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = failed_runs(app, clock, 40)
    started = app.bulk.start("retry", FAILED, rate=SLOW)
    real = app.runs.record_link
    calls = {"n": 0}
    taken_over: list[JobReport] = []

    def paused_at_the_fifth(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 5:  # paused past its lease; maintenance carries the operation on
            clock.advance(LEASE + timedelta(seconds=1))
            taken_over.append(bulk_job(app))
        real(*args, **kwargs)  # then it wakes and makes the link it was making

    monkeypatch.setattr(app.runs, "record_link", paused_at_the_fifth)

    returned = app.bulk.run(started.id, owner="paused")

    assert [(j.examined, j.acted) for j in taken_over] == [(1, 1)]
    stored = app.bulk.get(started.id)
    assert returned == stored  # its next write was refused: it stopped, and says why
    assert stored.status is OperationStatus.DONE and stored.owner is None
    assert (stored.tally.acted, stored.tally.skipped, stored.tally.failed) == (40, 0, 0)
    retried_once(app, sources, started.id)  # the paused link was not made a second time


def test_a_run_cancelled_meanwhile_by_the_operations_other_process_counts_as_acted_on(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = [trigger(app, clock, OTHER, {"n": n}) for n in range(6)]
    started = app.bulk.start("cancel", BulkFilter(queue="other"), rate=SLOW)
    real = app.runs.cancel_stored

    def other_process_first(run: Run, actor: str, reason: str, operation: str | None) -> Run:
        real(run, actor, reason, operation)  # the process this one took it from, paused
        return real(run, actor, reason, operation)

    monkeypatch.setattr(app.runs, "cancel_stored", other_process_first)

    done = app.bulk.run(started.id)

    assert (done.tally.acted, done.tally.skipped) == (6, 0)
    for run in waiting:
        assert app.runs.get(run.id).status is RunStatus.CANCELLED
        cancels = [e for e in app.runs.events(run.id) if e.type is EventType.CANCELLED]
        assert [e.data["operation"] for e in cancels] == [started.id]


@pytest.mark.parametrize("where", ["after_acting", "between_create_and_link"])
def test_an_operation_completes_however_often_the_process_carrying_it_dies(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sources = failed_runs(app, clock, 60)
    started = app.bulk.start("retry", FAILED, rate=FAST)
    owner, target = (
        (app.runs, "record_link") if where == "after_acting" else (app.engine.triggers, "relaunch")
    )
    real = getattr(owner, target)
    deaths = 0
    for attempt in range(20):
        monkeypatch.setattr(owner, target, dies_after(7, real))
        try:
            if attempt == 0:
                app.bulk.run(started.id, owner="first")
            else:
                clock.advance(LEASE)
                app.maintenance.run_pass()
        except Killed:
            deaths += 1
        monkeypatch.setattr(owner, target, real)
        if app.bulk.get(started.id).status is OperationStatus.DONE:
            break

    assert deaths >= 5
    done = app.bulk.get(started.id)
    assert done.status is OperationStatus.DONE
    assert (done.tally.acted, done.tally.skipped, done.tally.failed) == (60, 0, 0)
    retried_once(app, sources, started.id)


def test_a_live_process_renews_its_lease_mid_page_so_no_pass_takes_its_operation(
    app: Runlane, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = failed_runs(app, clock, 8)
    started = app.bulk.start("retry", FAILED, rate=SLOW)
    real = app.runs.record_link
    seen: list[BulkOperation] = []
    passes: list[JobReport] = []

    def slow(*args: Any, **kwargs: Any) -> None:
        clock.advance(20)  # a slow store: the page takes longer than the lease
        seen.append(app.bulk.get(started.id))
        passes.append(bulk_job(app))
        real(*args, **kwargs)

    monkeypatch.setattr(app.runs, "record_link", slow)

    done = app.bulk.run(started.id, owner="slow")

    assert [p.acted for p in passes] == [0] * 8
    assert {op.owner for op in seen} == {"slow"}
    assert len({op.version for op in seen}) > 2  # written mid-page, not only once a page
    assert (done.status, done.tally.acted) == (OperationStatus.DONE, 8)
    retried_once(app, sources, started.id)


def test_a_pass_out_of_time_hands_the_operation_back_and_the_next_goes_on(
    app: Runlane, clock: ManualClock
) -> None:
    sources = failed_runs(app, clock, 30)
    started = app.bulk.start("retry", FAILED, rate=SLOW)  # never carried out by its starter
    app.maintenance.bounds = MaintenanceConfig(bulk_seconds=1)
    assert bulk_job(app).examined == 0  # its starter has a lease's time to carry it out
    clock.advance(LEASE)

    first = bulk_job(app)

    assert (first.examined, first.acted) == (1, 1)
    back = app.bulk.get(started.id)
    assert back.status is OperationStatus.RUNNING and back.owner is None
    assert 0 < back.tally.acted < 30  # about a second's worth at 10 a second
    for _ in range(10):
        if app.bulk.get(started.id).status is OperationStatus.DONE:
            break
        assert bulk_job(app).acted == 1  # listed at once, no lease to wait for
    done = app.bulk.get(started.id)
    assert (done.status, done.tally.acted, done.tally.skipped) == (OperationStatus.DONE, 30, 0)
    retried_once(app, sources, started.id)


def test_a_stopped_operation_is_left_to_the_operator(app: Runlane, clock: ManualClock) -> None:
    sources = failed_runs(app, clock, 3)
    started = app.bulk.start("retry", FAILED)
    app.bulk.stop(started.id)
    clock.advance(LEASE * 2)

    assert bulk_job(app).examined == 0
    assert app.bulk.get(started.id).status is OperationStatus.STOPPED
    assert all(links(app, s.id) == [] for s in sources)
