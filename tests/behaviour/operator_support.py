"""What the operator behaviour tests (test_operator_observe.py, test_operator_recover.py)
share: the task names and their handlers (:class:`Tasks`), and the helpers that put runs
into a known state: ``trigger`` one second apart, ``make_running`` as a worker still
executing it, and ``one_of_each`` status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runlane_sqs import ManualClock, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run
from tests.behaviour.worker_support import drain

OK = "ops.ok"
FAIL = "ops.fail"
WAIT = "ops.wait"
OTHER = "ops.other"
FLAKY = "ops.flaky"
FLIP = "ops.flip"
LEASE = timedelta(seconds=60)


class Boom(Exception):
    """Raised by the failing handlers."""


@dataclass
class Tasks:
    """The tasks the operator tests use; ``fail`` says whether the failing task fails now."""

    fail: bool = True

    def register(self, app: Runlane) -> None:
        @app.task(name=OK)
        def ok(ctx: TaskContext, payload: Any) -> Any:
            return {"echo": payload}

        @app.task(name=FAIL)
        def fail(ctx: TaskContext, payload: Any) -> Any:
            if self.fail:
                raise Boom(f"failed on {str(payload)[:40]}")
            return {"recovered": payload}

        @app.task(name=WAIT)
        def wait(ctx: TaskContext, payload: Any) -> Any:
            return ctx.release(delay=3600)

        @app.task(name=OTHER, queue="other")
        def other(ctx: TaskContext, payload: Any) -> Any:
            return payload

        @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=3, backoff="fixed", delay=0))
        def flaky(ctx: TaskContext, payload: Any) -> Any:
            if ctx.attempt < 3:
                raise Boom(f"attempt {ctx.attempt}")
            return "finally"

        @app.task(name=FLIP)
        def flip(ctx: TaskContext, payload: Any) -> Any:
            """Fails when the payload says so: one task whose runs end in two statuses."""
            if payload.get("fail"):
                raise Boom("asked to fail")
            return payload


def trigger(app: Runlane, clock: ManualClock, task: str, payload: Any = None, **kw: Any) -> Run:
    """Trigger one second after the previous trigger, so creation times are distinct."""
    clock.advance(1)
    return app.trigger(task, payload, **kw)


def make_running(app: Runlane, run: Run, owner: str = "worker-held") -> Run:
    """Claim ``run`` directly, as a worker that is still executing it would have."""
    decision = machine.claim_lease(
        app.runs.get(run.id), now=app.clock.now(), owner=owner, token="tok-held", duration=LEASE
    )
    assert isinstance(decision, machine.Transition)
    return app.store.apply(decision)


def one_of_each(app: Runlane, clock: ManualClock) -> dict[RunStatus, Run]:
    """A run in each of succeeded, failed, released, cancelled, running and queued."""
    succeeded = trigger(app, clock, OK, "s")
    failed = trigger(app, clock, FAIL, "f")
    released = trigger(app, clock, WAIT, "w")
    assert drain(app) == 3
    cancelled = trigger(app, clock, OK, "c")
    app.runs.cancel(cancelled.id, reason="not needed", actor="tests")
    running = trigger(app, clock, OK, "r")
    make_running(app, running)
    queued = trigger(app, clock, OK, "q", delay=3600)
    runs = {
        RunStatus.SUCCEEDED: succeeded,
        RunStatus.FAILED: failed,
        RunStatus.RELEASED: released,
        RunStatus.CANCELLED: cancelled,
        RunStatus.RUNNING: running,
        RunStatus.QUEUED: queued,
    }
    for status, run in runs.items():
        assert app.runs.get(run.id).status is status
    return runs
