"""Code changed under a waiting run (docs/versions.md, "When the code no longer
matches"), on every backend and with both workers: a deploy between two attempts that
inserts a step before a recorded wait, renames a step, changes a wait or reorders waits
stops the next attempt before the new call does anything and parks the run
``history_diverged``, with the calls it reached, the one it asked for and the recorded
ones it did not reach. Code that matches, or only adds calls after the recorded ones,
is unaffected. No worker or maintenance pass unparks such a run; an operator unparks it
once matching code is deployed, or cancels and reruns it. A run whose cancel was
requested while the attempt ran is cancelled instead of parked. A new wait for a run
that diverges writes nothing for that run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.core.model import EventType
from tests.backends import Backend
from tests.behaviour.worker_support import second_app
from tests.workers import WorkerKind

ORDER = "divergence.order"
Handler = Callable[[TaskContext, Any], Any]


class Effects:
    """The side effects every deploy's handler performs, in order, across attempts."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def __call__(self, name: str) -> Callable[[], str]:
        def effect() -> str:
            self.done.append(name)
            return name

        return effect


def original(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        first = ctx.wait_for_token(payload["first"]).value
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def inserted_step(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        ctx.step("audit", effects("audit"))  # new, before the recorded wait
        first = ctx.wait_for_token(payload["first"]).value
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def renamed_step(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge-card", effects("charge-card"))  # was "charge"
        first = ctx.wait_for_token(payload["first"]).value
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def changed_wait(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        first = ctx.wait_for_signal(f"paid-{payload['first']}").payload  # was the token
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def reordered_waits(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        second = ctx.wait_for_token(payload["second"]).value  # the waits swapped
        first = ctx.wait_for_token(payload["first"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def appended_step(effects: Effects) -> Handler:
    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        first = ctx.wait_for_token(payload["first"]).value
        ctx.step("notify", effects("notify"))  # new, after every recorded call
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def answered_at_once(effects: Effects) -> Handler:
    """A first wait whose token was decided before it was asked: answered from the token
    itself, it records nothing, so it is no call to replay."""

    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        known = ctx.wait_for_token(payload["known"]).value
        first = ctx.wait_for_token(payload["first"]).value
        ctx.step("ship", effects("ship"))
        return [known, first]

    return order


def answered_run_wait(finished: str) -> Callable[[Effects], Handler]:
    """A first wait for a run that had finished before it was asked: answered from that
    run, it records nothing, so it is no call to replay."""

    def code(effects: Effects) -> Handler:
        def order(ctx: TaskContext, payload: Any) -> Any:
            ctx.step("charge", effects("charge"))
            status = ctx.wait_for_run(finished).status.value
            first = ctx.wait_for_token(payload["first"]).value
            ctx.step("ship", effects("ship"))
            return [status, first]

        return order

    return code


def patched(effects: Effects) -> Handler:
    """The inserted step behind a patch: runs already past that point keep to the old
    code; runs that reach it first take the new branch."""

    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        if ctx.patched("audit"):
            ctx.step("audit", effects("audit"))
        first = ctx.wait_for_token(payload["first"]).value
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def patched_async(effects: Effects) -> Handler:
    async def order(ctx: TaskContext, payload: Any) -> Any:
        await ctx.step_async("charge", effects("charge"))
        if await ctx.patched_async("audit"):
            await ctx.step_async("audit", effects("audit"))
        first = (await ctx.wait_for_token_async(payload["first"])).value
        second = (await ctx.wait_for_token_async(payload["second"])).value
        await ctx.step_async("ship", effects("ship"))
        return [first, second]

    return order  # type: ignore[return-value]


def deprecated_patch(effects: Effects) -> Handler:
    """Only the new branch left, once no run needs the old one."""

    def order(ctx: TaskContext, payload: Any) -> Any:
        ctx.step("charge", effects("charge"))
        ctx.deprecate_patch("audit")
        ctx.step("audit", effects("audit"))
        first = ctx.wait_for_token(payload["first"]).value
        second = ctx.wait_for_token(payload["second"]).value
        ctx.step("ship", effects("ship"))
        return [first, second]

    return order


def deploy(code: Callable[[Effects], Handler], effects: Effects) -> Callable[[Runlane], None]:
    def register(app: Runlane) -> None:
        app.task(code(effects), name=ORDER)

    return register


def started_on_the_original(
    backend: Backend, worker_kind: WorkerKind, effects: Effects
) -> tuple[Runlane, str, dict[str, str]]:
    """A run that charged, waited for its first token, and had that token decided: its
    next attempt replays ``charge`` and the first wait."""
    app = backend.app(register=deploy(original, effects))
    tokens = {"first": app.tokens.create().id, "second": app.tokens.create().id}
    run = app.trigger(ORDER, tokens)
    worker_kind.drain_all(app)
    assert app.runs.get(run.id).status is RunStatus.RELEASED
    app.tokens.complete(tokens["first"], "paid")
    return app, run.id, tokens


@pytest.mark.parametrize(
    ("code", "asked", "unreached"),
    [
        (inserted_step, "step audit", ["wait token:{first}#1"]),
        (renamed_step, "step charge-card", ["step charge", "wait token:{first}#1"]),
        (changed_wait, "wait signal:paid-{first}#1", ["wait token:{first}#1"]),
        (reordered_waits, "wait token:{second}#1", ["wait token:{first}#1"]),
    ],
    ids=["step-inserted", "step-renamed", "wait-changed", "waits-reordered"],
)
def test_a_change_that_no_longer_matches_the_history_parks_the_run_before_any_new_effect(
    backend: Backend,
    worker_kind: WorkerKind,
    code: Callable[[Effects], Handler],
    asked: str,
    unreached: list[str],
) -> None:
    effects = Effects()
    app, run_id, tokens = started_on_the_original(backend, worker_kind, effects)
    changed = second_app(backend, app, deploy(code, effects))
    worker_kind.drain_all(changed)

    parked = changed.runs.get(run_id)
    assert parked.status is RunStatus.PARKED
    assert parked.parked_reason == "history_diverged"
    assert effects.done == ["charge"]  # nothing the new code added ran, nothing twice
    event = changed.runs.events(run_id)[-1]
    assert event.type is EventType.PARKED
    reached = [] if code is renamed_step else ["step charge"]
    assert event.data == {
        "reason": "history_diverged",
        "worker": event.data["worker"],
        "reached": reached,
        "asked": asked.format(**tokens),
        "unreached": [u.format(**tokens) for u in unreached],
    }
    (last,) = changed.runs.attempts(run_id)[-1:]
    assert (last.number, last.outcome) == (2, "parked")
    assert parked.failures == 0 and parked.lease is None


def test_a_divergence_met_after_a_cancel_request_cancels_the_run_and_says_why(
    backend: Backend, worker_kind: WorkerKind, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator asked the run to stop while the changed code ran: the attempt stops at
    the new call as before, but the run ends ``cancelled``, not ``parked`` waiting for an
    unpark nobody wants, and its ``cancelled`` event holds the divergence."""
    effects = Effects()
    app, run_id, tokens = started_on_the_original(backend, worker_kind, effects)

    def cancelled_meanwhile(changed: Runlane) -> None:
        def order(ctx: TaskContext, payload: Any) -> Any:
            ctx.step("charge", effects("charge"))
            changed.runs.cancel(ctx.run_id, actor="ops", reason="not needed any more")
            ctx.step("audit", effects("audit"))  # new, before the recorded wait
            return ctx.wait_for_token(payload["first"]).value

        changed.task(order, name=ORDER)

    changed = second_app(backend, app, cancelled_meanwhile)
    worker_kind.drain_all(changed)

    cancelled = changed.runs.get(run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert (cancelled.parked_reason, cancelled.parked_from) == (None, None)
    assert effects.done == ["charge"]  # the new step did not run
    events = changed.runs.events(run_id)
    assert [e.type for e in events[-2:]] == [EventType.CANCEL_REQUESTED, EventType.CANCELLED]
    assert events[-1].data == {
        "after": "history_diverged",
        "reached": ["step charge"],
        "asked": "step audit",
        "unreached": [f"wait token:{tokens['first']}#1"],
    }
    (last,) = changed.runs.attempts(run_id)[-1:]
    assert (last.number, last.outcome) == (2, "cancelled")
    assert cancelled.failures == 0 and cancelled.lease is None
    assert [r.message for r in caplog.records if r.levelno >= logging.ERROR] == []


def inserted_run_wait(other: str) -> Callable[[Effects], Handler]:
    """A wait for run ``other`` inserted before the recorded token wait."""

    def code(effects: Effects) -> Handler:
        def order(ctx: TaskContext, payload: Any) -> Any:
            ctx.step("charge", effects("charge"))
            ctx.wait_for_run(other)  # new, before the recorded wait
            return ctx.wait_for_token(payload["first"]).value

        return order

    return code


def inserted_run_wait_async(other: str) -> Callable[[Effects], Handler]:
    """:func:`inserted_run_wait` in an ``async def`` handler (named ``order`` too: a
    step's call site is the function that calls it)."""

    def code(effects: Effects) -> Handler:
        async def order(ctx: TaskContext, payload: Any) -> Any:
            await ctx.step_async("charge", effects("charge"))
            await ctx.wait_for_run_async(other)  # new, before the recorded wait
            return (await ctx.wait_for_token_async(payload["first"])).value

        return order  # type: ignore[return-value]

    return code


@pytest.mark.parametrize(
    "code", [inserted_run_wait, inserted_run_wait_async], ids=["sync", "async"]
)
def test_a_run_wait_that_diverges_writes_nothing_for_the_run_it_would_wait_for(
    backend: Backend,
    worker_kind: WorkerKind,
    code: Callable[[str], Callable[[Effects], Handler]],
) -> None:
    """The attempt stops before the new wait does anything: the run it names is not
    marked as watched (its end would otherwise be reported to a run that never waits)."""
    effects = Effects()
    app, run_id, tokens = started_on_the_original(backend, worker_kind, effects)
    later = {"first": app.tokens.create().id, "second": app.tokens.create().id}
    other = app.trigger(ORDER, later, delay=timedelta(hours=1))  # not finished
    changed = second_app(backend, app, deploy(code(other.id), effects))
    worker_kind.drain_all(changed)

    parked = changed.runs.get(run_id)
    assert parked.status is RunStatus.PARKED
    event = changed.runs.events(run_id)[-1]
    assert (event.data["asked"], event.data["unreached"]) == (
        f"wait run:{other.id}#1",
        [f"wait token:{tokens['first']}#1"],
    )
    assert changed.runs.get(other.id).watched is False  # nothing written for the wait
    assert parked.waiting is None and effects.done == ["charge"]


def test_a_run_wait_answered_at_once_is_still_no_call_to_replay(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """A wait for a run that had already finished is answered from that run and records
    nothing: the next attempt meets it again while its recorded token wait is still
    ahead, and carries on (as with a token decided before it was asked)."""
    effects = Effects()
    app = backend.app(register=deploy(original, effects))
    tokens = {"first": app.tokens.create().id, "second": app.tokens.create().id}
    finished = app.trigger(ORDER, tokens)
    app.runs.cancel(finished.id, actor="ops", reason="finished before anyone waits for it")
    waiter = second_app(backend, app, deploy(answered_run_wait(finished.id), effects))
    first = waiter.tokens.create()
    run = waiter.trigger(ORDER, {"first": first.id})
    worker_kind.drain_all(waiter)
    assert waiter.runs.get(run.id).status is RunStatus.RELEASED
    waiter.tokens.complete(first.id, "paid")
    worker_kind.drain_all(waiter)

    assert waiter.runs.get(run.id).result == ["cancelled", "paid"]
    assert effects.done == ["charge", "ship"]


def test_code_that_only_adds_calls_after_the_recorded_ones_carries_on(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    effects = Effects()
    app, run_id, tokens = started_on_the_original(backend, worker_kind, effects)
    changed = second_app(backend, app, deploy(appended_step, effects))
    worker_kind.drain_all(changed)
    assert changed.runs.get(run_id).status is RunStatus.RELEASED  # on its second token
    changed.tokens.complete(tokens["second"], "shipped")
    worker_kind.drain_all(changed)

    assert changed.runs.get(run_id).result == ["paid", "shipped"]
    assert effects.done == ["charge", "notify", "ship"]


def test_a_diverged_run_stays_parked_until_an_operator_unparks_it_under_matching_code(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    effects = Effects()
    app, run_id, tokens = started_on_the_original(backend, worker_kind, effects)
    changed = second_app(backend, app, deploy(inserted_step, effects))
    worker_kind.drain_all(changed)
    assert changed.runs.get(run_id).status is RunStatus.PARKED

    # the diverged code's maintenance and workers leave it parked
    backend.clock.advance(changed.config.republish_after * 2)
    changed.maintenance.run_pass()
    worker_kind.drain_all(changed)
    assert changed.runs.get(run_id).status is RunStatus.PARKED

    restored = second_app(backend, app, deploy(original, effects))  # matching code again
    unparked = restored.runs.unpark(run_id, actor="ops", reason="v1 code deployed")
    assert (unparked.status, unparked.parked_reason) == (RunStatus.RELEASED, None)
    worker_kind.drain_all(restored)
    assert restored.runs.get(run_id).status is RunStatus.RELEASED  # on its second token
    restored.tokens.complete(tokens["second"], "shipped")
    worker_kind.drain_all(restored)

    assert restored.runs.get(run_id).result == ["paid", "shipped"]
    assert effects.done == ["charge", "ship"]


def test_a_diverged_run_can_be_cancelled_and_rerun_from_scratch_on_the_new_code(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    effects = Effects()
    app, run_id, _ = started_on_the_original(backend, worker_kind, effects)
    changed = second_app(backend, app, deploy(inserted_step, effects))
    worker_kind.drain_all(changed)

    changed.runs.cancel(run_id, actor="ops", reason="start over on v2")
    rerun = changed.runs.rerun(run_id, actor="ops", reason="start over on v2")
    worker_kind.drain_all(changed)

    assert changed.runs.get(rerun.id).status is RunStatus.RELEASED
    assert effects.done == ["charge", "charge", "audit"]  # the new run's own effects


def test_a_wait_answered_at_once_records_nothing_and_replays_as_before(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    effects = Effects()
    app = backend.app(register=deploy(answered_at_once, effects))
    known, first = app.tokens.create(), app.tokens.create()
    app.tokens.complete(known.id, "in stock")
    run = app.trigger(ORDER, {"known": known.id, "first": first.id})
    worker_kind.drain_all(app)
    assert app.runs.get(run.id).status is RunStatus.RELEASED
    app.tokens.complete(first.id, "paid")
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).result == ["in stock", "paid"]
    assert effects.done == ["charge", "ship"]


@pytest.mark.parametrize("code", [patched, patched_async], ids=["sync", "async"])
def test_a_patch_keeps_runs_past_it_on_the_old_branch_and_takes_new_runs_down_the_new(
    backend: Backend, worker_kind: WorkerKind, code: Callable[[Effects], Handler]
) -> None:
    effects = Effects()
    app, old_run, tokens = started_on_the_original(backend, worker_kind, effects)
    changed = second_app(backend, app, deploy(code, effects))
    new_run = changed.trigger(ORDER, tokens)
    worker_kind.drain_all(changed)  # the old run passes its first wait; the new one both
    changed.tokens.complete(tokens["second"], "shipped")
    worker_kind.drain_all(changed)

    for run_id in (old_run, new_run.id):
        assert changed.runs.get(run_id).result == ["paid", "shipped"]
    # the old run: charge (v1), ship; the new one: charge, audit, ship, each once
    assert sorted(effects.done) == sorted(["charge", "ship", "charge", "audit", "ship"])
    assert "patch:audit" in changed.runs.get(new_run.id).steps
    assert "patch:audit" not in changed.runs.get(old_run).steps


def test_a_deprecated_patch_replays_the_runs_that_took_it(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    effects = Effects()
    app = backend.app(register=deploy(patched, effects))
    tokens = {"first": app.tokens.create().id, "second": app.tokens.create().id}
    run = app.trigger(ORDER, tokens)
    worker_kind.drain_all(app)
    app.tokens.complete(tokens["first"], "paid")
    app.tokens.complete(tokens["second"], "shipped")
    cleaned = second_app(backend, app, deploy(deprecated_patch, effects))
    worker_kind.drain_all(cleaned)

    assert cleaned.runs.get(run.id).result == ["paid", "shipped"]
    assert effects.done == ["charge", "audit", "ship"]


def test_a_step_may_not_take_a_patch_s_name(backend: Backend, worker_kind: WorkerKind) -> None:
    app = backend.app(
        register=lambda a: a.task(lambda ctx, p: ctx.step("patch:x", str), name=ORDER)
    )
    run = app.trigger(ORDER)
    worker_kind.drain_all(app)
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert "starts ctx.patched's names" in failed.failure.message
