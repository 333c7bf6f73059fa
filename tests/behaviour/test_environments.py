"""Environments on one table: each environment's runs are run by its own workers (issue
13, item 1), with the sync and the async worker, on every backend.

By default an environment has queues of its own (``runlane-{environment}-{queue}``). Two
environments given the same ``queue_prefix`` share its queues on purpose: a worker that
receives a wakeup of the other environment does not delete it but makes it visible again
for that environment's workers, counts it and warns once that the queue is shared.

In memory a queue is known by its logical name alone, so two apps on one in-memory
transport share their queues whatever their prefix: there every test here plays the
shared queue.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from runlane_sqs import Run, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.testing import InMemoryRunStore
from tests.backends import Backend
from tests.emulators import TEST_BACKEND
from tests.workers import WorkerKind

TASK = "environments.work"
RUNS = 5
SHARED_WARNING = "receives wakeups of environment"


class Calls:
    """The handler of both environments: records (environment, run id) of each call."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        self.seen.append((ctx.environment, ctx.run_id))
        return payload

    def register(self, app: Runlane) -> None:
        app.task(self, name=TASK)


@pytest.fixture
def calls() -> Calls:
    return Calls()


def environment(backend: Backend, name: str) -> str:
    """``name``, made fresh on LocalStack, which refuses to create again a queue name
    deleted less than a minute ago (the queues of an environment are named after it)."""
    if backend.real and TEST_BACKEND != "moto":
        return f"{name}-{uuid.uuid4().hex[:8]}"
    return name


def env_app(
    backend: Backend, name: str, calls: Calls, *, beside: Runlane | None = None, **options: Any
) -> Runlane:
    """An app of environment ``name`` on the test's table, its queues named by default
    unless ``options`` give a ``queue_prefix``. In memory it has a store of its own and
    the transport of ``beside``, if given."""
    if backend.real:
        options.setdefault("queue_prefix", None)  # not RUNLANE_QUEUE_PREFIX: the default
        return backend.app(environment=name, register=calls.register, **options)
    app = Runlane(
        environment=name,
        clock=backend.clock,
        store=InMemoryRunStore(name),
        transport=beside.transport if beside is not None else InMemoryTransport(backend.clock),
        **options,
    )
    calls.register(app)
    return app


def prod_and_staging(backend: Backend, calls: Calls, **options: Any) -> tuple[Runlane, Runlane]:
    prod = env_app(backend, environment(backend, "prod"), calls, **options)
    staging = env_app(backend, environment(backend, "staging"), calls, beside=prod, **options)
    return prod, staging


def statuses(app: Runlane, runs: list[Run]) -> list[RunStatus]:
    return [app.runs.get(run.id).status for run in runs]


def executed(app: Runlane, runs: list[Run]) -> list[tuple[str, str]]:
    return [(app.config.environment, run.id) for run in runs]


def shared_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and SHARED_WARNING in r.getMessage()
    ]


def shared_prefix() -> str:
    """A queue prefix both environments are given on purpose (fresh: see
    :func:`environment`)."""
    return f"shared-{uuid.uuid4().hex[:8]}-"


def test_two_environments_on_the_default_queue_names_each_run_all_their_own_runs(
    worker_kind: WorkerKind, backend: Backend, calls: Calls
) -> None:
    prod, staging = prod_and_staging(backend, calls)
    prod_runs = prod.trigger_many(TASK, [{"prod": n} for n in range(RUNS)])
    staging_runs = staging.trigger_many(TASK, [{"staging": n} for n in range(RUNS)])

    assert worker_kind.drain(prod) == RUNS
    assert worker_kind.drain(staging) == RUNS

    assert statuses(prod, prod_runs) == [RunStatus.SUCCEEDED] * RUNS
    assert statuses(staging, staging_runs) == [RunStatus.SUCCEEDED] * RUNS
    assert sorted(calls.seen) == sorted(executed(prod, prod_runs) + executed(staging, staging_runs))
    assert (backend.depth(prod), backend.depth(staging)) == (0, 0)  # each queue looked up
    for app in (prod, staging):
        assert app.config.sqs_queue_name("default") == f"runlane-{app.config.environment}-default"


def test_a_worker_leaves_wakeups_of_another_environment_on_a_shared_queue(
    worker_kind: WorkerKind,
    backend: Backend,
    calls: Calls,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prod, staging = prod_and_staging(backend, calls, queue_prefix=shared_prefix())
    foreign = staging.trigger_many(TASK, [{"staging": n} for n in range(3)])
    worker = worker_kind.build(prod)

    with caplog.at_level(logging.INFO, logger="runlane_sqs"):
        assert worker_kind.drain_worker(worker) == 0

    assert calls.seen == []
    assert statuses(staging, foreign) == [RunStatus.QUEUED] * 3
    assert backend.depth(staging) == 3  # none deleted
    assert worker.returned >= 3
    [warning] = shared_warnings(caplog)
    assert f"environment {staging.config.environment!r}" in warning
    assert f"this worker's environment is {prod.config.environment!r}" in warning
    if backend.real:
        assert staging.config.sqs_queue_name("default") in warning

    assert worker_kind.drain(staging) == 3  # visible again at once: nothing waits
    assert statuses(staging, foreign) == [RunStatus.SUCCEEDED] * 3
    assert sorted(calls.seen) == sorted(executed(staging, foreign))
    assert backend.depth(staging) == 0
