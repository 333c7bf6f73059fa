"""App versions (docs/versions.md), on every backend and with both workers: a run keeps
the version of its first attempt and each attempt records its own, whether the claim is
one write on the wakeup's hint or follows a read; ``app.runs.versions`` counts the
unfinished runs per version and task, and the console shows both, escaped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import new_lease_token
from runlane_sqs.core.versions import SHORTEST_PIN_DELAY
from tests.backends import Backend
from tests.behaviour.console_support import client_for
from tests.behaviour.worker_support import drain, second_app
from tests.emulators import wait_until
from tests.workers import WorkerKind

APPROVAL = "versions.approval"
LIMITED = "versions.limited"
"""A task on a queue with a concurrency limit: its claims read the run first."""
QUICK = "versions.quick"
OLD, NEW = "2026.11.3", "2026.12.1"
HOSTILE = '<script>alert("x")</script>\u202e'


def register(app: Runlane) -> None:
    limited = app.queue("versions-limited", concurrency_limit=5)

    def approval(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value

    app.task(approval, name=APPROVAL)
    app.task(approval, name=LIMITED, queue=limited)

    @app.task(name=QUICK)
    def quick(ctx: TaskContext, payload: Any) -> str:
        return "ok"


def deploys(backend: Backend) -> tuple[Runlane, Runlane]:
    old = backend.app(register=register, app_version=OLD, queues=["default", "versions-limited"])
    return old, second_app(backend, old, register, app_version=NEW)


def test_a_run_keeps_its_first_attempt_s_version_and_each_attempt_records_its_own(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    old, new = deploys(backend)
    runs = {}
    for task in (APPROVAL, LIMITED):
        token = old.tokens.create()
        runs[task] = (old.trigger(task, {"token": token.id}), token)
    worker_kind.drain_all(old)
    for run, token in runs.values():
        assert old.runs.get(run.id).status is RunStatus.RELEASED
        new.tokens.complete(token.id, "approved")
    worker_kind.drain_all(new)

    for task, (run, _) in runs.items():
        done = new.runs.get(run.id)
        assert (done.status, done.result) == (RunStatus.SUCCEEDED, "approved"), task
        assert done.app_version == OLD, task
        attempts = new.runs.attempts(run.id)
        assert [(a.number, a.app_version) for a in attempts] == [(1, OLD), (2, NEW)], task


def test_the_versions_count_holds_unfinished_runs_per_version_and_task(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    old, new = deploys(backend)
    token = old.tokens.create()
    for _ in range(3):
        old.trigger(APPROVAL, {"token": token.id})
    old.trigger(QUICK)
    worker_kind.drain_all(old)
    new.trigger(APPROVAL, {"token": token.id})
    worker_kind.drain_all(new)
    unversioned = second_app(backend, old, register)  # this test's handlers: no distribution
    assert unversioned.engine.app_version is None
    unversioned.trigger(LIMITED, {"token": token.id})
    worker_kind.drain_all(unversioned)
    old.trigger(QUICK)  # not started: it takes the version of whichever worker claims it

    report = new.runs.versions()
    assert [(c.app_version, c.task, c.statuses) for c in report.counts] == [
        (None, LIMITED, {"released": 1}),
        (OLD, APPROVAL, {"released": 3}),
        (NEW, APPROVAL, {"released": 1}),
    ]
    assert report.not_started == {QUICK: 1}
    only = new.runs.versions(task=QUICK)
    assert (only.counts, only.not_started) == ([], {QUICK: 1})

    new.tokens.complete(token.id, "approved")
    worker_kind.drain_all(new)
    finished = new.runs.versions()
    assert (finished.counts, finished.not_started, finished.versions) == ([], {}, [])


def test_the_console_shows_each_run_s_versions_and_counts_them_escaped(backend: Backend) -> None:
    old, new = deploys(backend)
    token = old.tokens.create()
    run = old.trigger(APPROVAL, {"token": token.id})
    assert drain(old) == 1
    # a version no app would accept, written by another writer of the table
    stranger = old.trigger(QUICK)
    claim = machine.claim_lease(
        old.runs.get(stranger.id),
        now=old.clock.now(),
        owner="worker-elsewhere",
        token=new_lease_token(),
        duration=timedelta(minutes=5),
        app_version=HOSTILE,
    )
    assert isinstance(claim, Transition)
    old.store.apply(claim)
    client = client_for(new)

    page = client.get(f"/runs/{run.id}").text
    assert f'<code id="app-version">{OLD}</code>' in page
    assert f"<td>{OLD}</td>" in page  # the attempt's version
    versions = client.get("/versions")
    assert versions.status_code == 200
    assert f"<code>{OLD}</code>" in versions.text and APPROVAL in versions.text
    assert "<script>" not in versions.text and "&lt;script&gt;" in versions.text
    assert "<script>" not in client.get(f"/runs/{stranger.id}").text


PINNED = "versions.pinned"


def register_pinned(app: Runlane) -> None:
    register(app)

    @app.task(name=PINNED, pin_version=True)
    def pinned(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value


def resumed_on_old(backend: Backend, worker_kind: WorkerKind) -> tuple[Runlane, Runlane, str]:
    """Both deploys, and a pinned run started by the old one whose token is decided."""
    old = backend.app(register=register_pinned, app_version=OLD)
    new = second_app(backend, old, register_pinned, app_version=NEW)
    token = old.tokens.create()
    run = old.trigger(PINNED, {"token": token.id})
    worker_kind.drain_all(old)
    new.tokens.complete(token.id, "approved")
    return old, new, run.id


def test_a_pinned_run_finishes_on_the_version_it_started_under(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    old, new, on_old = resumed_on_old(backend, worker_kind)
    on_new = new.trigger(PINNED, {"token": new.tokens.create().id})  # anyone's: not started

    worker_kind.drain_all(new)
    assert new.runs.get(on_new.id).app_version == NEW
    left = new.runs.get(on_old)
    assert (left.status.is_runnable, left.attempt) == (True, 1)  # left to an old worker
    assert backend.depth(new) == 1  # its wakeup sent again, a new message: no dead letter

    backend.clock.advance(SHORTEST_PIN_DELAY)  # the wakeup comes back (a real delay on SQS)

    def finished() -> bool:
        worker_kind.drain_all(old)
        return old.runs.get(on_old).is_terminal

    wait_until(finished, 30, "an old worker to finish the run")
    done = old.runs.get(on_old)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, "approved")
    assert [a.app_version for a in old.runs.attempts(on_old)] == [OLD, OLD]


def test_maintenance_reports_a_pinned_run_no_worker_of_its_version_claims(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    _, new, run_id = resumed_on_old(backend, worker_kind)
    worker_kind.drain_all(new)  # left to an old worker; none runs any more

    backend.clock.advance(new.config.republish_after)
    assert new.maintenance.run_pass().due.stranded == {}  # not for long enough yet
    backend.clock.advance(timedelta(minutes=15))
    report = new.maintenance.run_pass()
    assert report.due.stranded == {OLD: 1}
    assert report.to_json()["jobs"]["due_wakeups"]["stranded"] == {OLD: 1}
    assert new.runs.get(run_id).attempt == 1
