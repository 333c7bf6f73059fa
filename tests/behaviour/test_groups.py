"""Groups on every backend: ``ctx.map`` fans out and joins once, ``app.group`` triggers
its callback once, children start as a sliding window, failures past ``tolerate`` fail
the group, and bad input is refused before anything is written. A group's records go
when its parent goes, never before: ``runs prune`` deletes them with the parent, and a
parent that opened a group never expires by DynamoDB's TTL.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from tenacity import wait_none

from bench.fanout import item_bytes
from runlane_sqs import (
    ConfigurationError,
    EventType,
    IllegalTransition,
    RetryPolicy,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core import groups as core_groups
from runlane_sqs.core import machine
from runlane_sqs.core.errors import (
    InvalidCursor,
    InvalidKeyError,
    PayloadTooLarge,
    RunNotFound,
    StorageUnavailable,
    UnknownTaskError,
)
from runlane_sqs.core.groups import (
    GroupFailed,
    GroupStatus,
    callback_run_id,
    child_run_id,
    group_id_for,
    next_group_id,
    redriven_parent_id,
)
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.runtime import budget
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.waits_support import drain_all, qualified
from tests.behaviour.worker_support import claim_elsewhere, drain
from tests.emulators import scan_items
from tests.workers import WorkerKind


class Handlers:
    def __init__(self) -> None:
        self.parent_attempts = 0
        self.running = 0
        self.most_running = 0
        self.callbacks: list[Any] = []

    def square(self, ctx: TaskContext, payload: Any) -> Any:
        if payload.get("fail"):
            raise ValueError(f"item {payload['n']} broke")
        return payload["n"] ** 2

    def square_of(self, ctx: TaskContext, payload: Any) -> Any:
        return payload**2

    def month(self, ctx: TaskContext, payload: Any) -> Any:
        self.parent_attempts += 1
        items = [{"n": n, "fail": n in payload.get("fail", [])} for n in range(payload["count"])]
        try:
            results = ctx.map(
                "square",
                items,
                max_in_flight=payload.get("window", 100),
                tolerate=payload.get("tolerate", 0),
            )
        except GroupFailed as failed:
            return {"failed_group": failed.results.failed}
        return {
            "succeeded": results.succeeded,
            "failed": results.failed,
            "sum": sum(r for r in results.results() if r is not None),
            "failures": [f.failure.message for f in results.failures() if f.failure],
        }

    def notify(self, ctx: TaskContext, payload: Any) -> Any:
        joined = ctx.joined_group()
        assert joined is not None
        self.callbacks.append((payload, joined.status.value, list(joined.results())))
        return joined.succeeded


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
def app(backend: Backend, handlers: Handlers) -> Runlane:
    def register(app: Runlane) -> None:
        app.task(handlers.square, name="square")
        app.task(handlers.month, name="month")
        app.task(handlers.notify, name="notify")
        app.task(handlers.square_of, name="square-of")

    return backend.app(register=register)


def test_a_map_joins_once_and_the_parent_gets_every_result_from_storage(
    app: Runlane, handlers: Handlers
) -> None:
    parent = app.trigger("month", {"count": 12})
    assert drain(app, max_runs=1) == 1
    waiting = app.runs.get(parent.id)
    assert waiting.status is RunStatus.RELEASED
    assert waiting.waiting is not None and waiting.waiting.kind is WaitKind.GROUP
    assert waiting.lease is None  # it holds no worker while it waits
    drain_all(app)
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {
        "succeeded": 12,
        "failed": 0,
        "sum": sum(n * n for n in range(12)),
        "failures": [],
    }
    assert handlers.parent_attempts == 2  # one to open the group, one after the join
    resumes = [e for e in app.runs.events(parent.id) if e.type is EventType.RESUMED]
    assert len(resumes) == 1
    # the results stay with the children: the parent's item holds the counts only
    assert "sum" not in str(done.wait_results)


def test_children_start_as_a_sliding_window(app: Runlane) -> None:
    parent = app.trigger("month", {"count": 7, "window": 3})
    assert drain(app, max_runs=1) == 1
    group_id = group_id_for(parent.id, "group:#1")
    started = [app.store.get_run(child_run_id(group_id, i)) for i in range(7)]
    assert [run is not None for run in started] == [True] * 3 + [False] * 4
    assert drain(app, max_runs=1) == 1  # one child finishes: one more starts
    assert app.store.get_run(child_run_id(group_id, 3)) is not None
    assert app.store.get_run(child_run_id(group_id, 4)) is None
    drain_all(app)
    assert app.runs.get(parent.id).result["succeeded"] == 7


def test_failures_within_tolerate_still_succeed(app: Runlane) -> None:
    parent = app.trigger("month", {"count": 10, "fail": [3], "tolerate": 0.1})
    drain_all(app)
    result = app.runs.get(parent.id).result
    assert result["succeeded"] == 9
    assert result["failed"] == 1
    assert result["failures"] == ["item 3 broke"]


def test_failures_past_tolerate_fail_the_group_and_start_no_more_children(
    app: Runlane,
) -> None:
    parent = app.trigger("month", {"count": 10, "fail": [0], "window": 2})
    drain_all(app)
    assert app.runs.get(parent.id).result == {"failed_group": 1}
    group_id = group_id_for(parent.id, "group:#1")
    never = [i for i in range(10) if app.store.get_run(child_run_id(group_id, i)) is None]
    assert len(never) >= 7  # the window was 2: at most three children ever started


def test_an_empty_map_joins_at_once_without_waiting(app: Runlane, handlers: Handlers) -> None:
    parent = app.trigger("month", {"count": 0})
    assert drain(app) == 1
    done = app.runs.get(parent.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result["succeeded"] == 0
    assert handlers.parent_attempts == 1
    # never waited for, so no event names it; operators still see it
    [group] = app.runs.groups(parent.id)
    assert (group.total, group.status, group.joined_at is not None) == (
        0,
        GroupStatus.SUCCEEDED,
        True,
    )


def test_a_group_triggers_its_callback_once_with_the_results(
    app: Runlane, handlers: Handlers
) -> None:
    group = app.group(
        [("square", {"n": n}) for n in range(5)], then=("notify", {"album": 7}), max_in_flight=2
    )
    assert group.total == 5
    drain_all(app)
    assert handlers.callbacks == [({"album": 7}, "succeeded", [0, 1, 4, 9, 16])]
    # a second join (maintenance racing a finisher) triggers nothing more
    app.engine.groups.join(app.store.groups.get_group(group.id))
    drain_all(app)
    assert len(handlers.callbacks) == 1


def test_a_failed_group_still_triggers_its_callback_which_sees_the_failure(
    app: Runlane, handlers: Handlers
) -> None:
    app.group([("square", {"n": 1}), ("square", {"n": 2, "fail": True})], then=("notify", None))
    drain_all(app)
    assert handlers.callbacks == [(None, GroupStatus.FAILED.value, [1, None])]


def test_a_child_counted_twice_is_impossible_even_when_its_finish_is_replayed(
    app: Runlane,
) -> None:
    group = app.group([("square", {"n": n}) for n in range(3)], then=("notify", None))
    drain_all(app)
    child = app.runs.get(child_run_id(group.id, 0))
    app.engine.finisher.after_finished(child)  # a redelivered finish: nothing is counted again
    stored = app.store.groups.get_group(group.id)
    assert (stored.succeeded, stored.failed, stored.cancelled) == (3, 0, 0)
    assert stored.joined_at is not None


def test_a_finisher_that_read_the_group_before_its_last_position_started_counts_its_child(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children of a window of two finish at once: the first one's count starts the
    last position; the second one's finisher read the group before that, so it asks to
    start a position too. Its count is refused, sent again without a start, and must not
    then look for the position it did not start: that raised ``KeyError``, and the message
    was left for redelivery a visibility timeout later. Found by the simulation
    (simulation/, docs/simulation.md)."""
    group = app.group([("square", {"n": n}) for n in range(3)], max_in_flight=2)
    before = app.store.groups.get_group(group.id)
    groups = app.engine.groups
    monkeypatch.setattr(groups, "after_child", lambda run: None)  # their finishers died
    assert drain(app, max_runs=2) == 2
    monkeypatch.undo()
    groups.after_child(app.runs.get(child_run_id(group.id, 0)))  # starts the last position
    monkeypatch.setattr(app.store.groups, "get_group", lambda group_id: before)
    groups.after_child(app.runs.get(child_run_id(group.id, 1)))  # read the group before that
    monkeypatch.undo()
    stored = app.store.groups.get_group(group.id)
    assert (stored.succeeded, stored.started) == (2, 3)
    drain_all(app)
    assert app.store.groups.get_group(group.id).joined_at is not None


def test_a_map_whose_requests_meet_throttling_sends_them_again(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map's requests (the read of its group, the opening: one transaction fenced on
    the parent's lease, the join's read of its children) are sent again within their
    budget, as a step's write is: a moment of throttling does not fail the parent. Sending
    the opening again is safe: a second opening returns the first. Found by the
    simulation (simulation/, docs/simulation.md)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    refused: list[str] = []

    def throttled_once(name: str) -> None:
        send = getattr(app.store.groups, name)

        def once(*args: Any) -> Any:
            if name not in refused:
                refused.append(name)
                raise StorageUnavailable("DynamoDB is unavailable: ThrottlingException")
            return send(*args)

        monkeypatch.setattr(app.store.groups, name, once)

    for name in ("get_group", "open_group", "children"):  # its read, its opening, its join
        throttled_once(name)
    run = app.trigger("month", {"count": 3})
    drain_all(app)
    assert refused == ["get_group", "open_group", "children"]
    done = app.runs.get(run.id)
    assert (done.status, done.failures) == (RunStatus.SUCCEEDED, 0)
    assert done.result["sum"] == 0 + 1 + 4


def test_a_map_whose_children_fail_to_start_after_a_lost_opening_still_starts_them(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The opening's write lands but its answer is lost, then creating the first child
    fails three times in a row: storing the group and starting its children are retried
    apart, each within its own budget, so the group is stored once and the parent does not
    fail. Retried as one, the four tries of the whole ran out and failed the parent. Found
    by the simulation (``make simulate SEED=3`` with lost answers and duplicates often:
    ``tests/simulation/test_simulation.py``'s ``REPLAYING``)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    groups, store = app.store.groups, app.store
    open_group, create_run = groups.open_group, store.create_run
    failures: list[str] = []

    def opened_but_lost(*args: Any) -> Any:
        if "opening" not in failures:
            failures.append("opening")
            open_group(*args)
            raise StorageUnavailable("DynamoDB is unavailable: the answer was lost")
        return open_group(*args)

    def refused_thrice(*args: Any, **options: Any) -> Any:
        if failures.count("child") < 3:
            failures.append("child")
            raise StorageUnavailable("DynamoDB is unavailable: ThrottlingException")
        return create_run(*args, **options)

    run = app.trigger("month", {"count": 3})
    monkeypatch.setattr(groups, "open_group", opened_but_lost)
    monkeypatch.setattr(store, "create_run", refused_thrice)
    drain_all(app)
    assert failures == ["opening", "child", "child", "child"]
    done = app.runs.get(run.id)
    assert (done.status, done.failures) == (RunStatus.SUCCEEDED, 0)
    assert done.result["sum"] == 0 + 1 + 4


@pytest.mark.parametrize(
    ("children", "options", "error"),
    [
        ([("nope", {})], {}, UnknownTaskError),
        ([("square", {"n": 1})], {"max_in_flight": 0}, ConfigurationError),
        ([("square", {"n": 1})], {"tolerate": 1.5}, ConfigurationError),
        ([("square", {"n": 1})], {"tolerate": -1}, ConfigurationError),
        ([("square", {"n": 1})], {"max_inflight": 3}, TypeError),
        ([("square", {"n": 1})], {"tolerate": True}, ConfigurationError),
        ([("square", {"pad": "x" * 70_000})], {}, PayloadTooLarge),
        (["square"], {}, ConfigurationError),
    ],
)
def test_bad_groups_are_refused_before_anything_is_written(
    app: Runlane, children: list[Any], options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        app.group(children, then=("notify", None), **options)
    assert app.runs.list().runs == []


def test_a_callback_task_that_is_not_registered_is_refused(app: Runlane) -> None:
    with pytest.raises(UnknownTaskError):
        app.group([("square", {"n": 1})], then=("missing", None))


def test_a_parent_whose_map_has_bad_items_fails_without_starting_children(
    app: Runlane,
) -> None:
    def bad_parent(ctx: TaskContext, payload: Any) -> Any:
        return ctx.map("missing", [1, 2])

    app.task(bad_parent, name="bad-parent")
    run = app.trigger("bad-parent")
    assert drain(app) == 1
    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and failed.failure.type == qualified(UnknownTaskError)
    assert [r.id for r in app.runs.list().runs] == [run.id]


def test_maintenance_starts_a_child_and_joins_a_group_an_interrupted_finisher_left(
    app: Runlane, backend: Backend, handlers: Handlers
) -> None:
    group = app.group([("square", {"n": n}) for n in range(2)], then=("notify", None))
    # the children finish, but their finishers die before moving the group on
    original = app.engine.finisher._groups.after_child
    app.engine.finisher._groups.after_child = lambda run: None  # type: ignore[method-assign]
    try:
        drain_all(app)
    finally:
        app.engine.finisher._groups.after_child = original  # type: ignore[method-assign]
    assert handlers.callbacks == []
    backend.clock.advance(app.config.republish.after * 2)
    report = app.maintenance.run_pass()
    assert report.job("groups").acted == 1
    drain_all(app)
    assert [c[1] for c in handlers.callbacks] == ["succeeded"]
    assert app.store.groups.get_group(group.id).joined_at is not None


def test_async_handlers_map_with_map_async(backend: Backend) -> None:
    def square(ctx: TaskContext, payload: Any) -> Any:
        return payload * 2

    async def parent(ctx: TaskContext, payload: Any) -> Any:
        results = await ctx.map_async("double", [1, 2, 3])
        return list(results.results())

    app = backend.app(
        register=lambda a: (a.task(square, name="double"), a.task(parent, name="parent"))
    )
    run = app.trigger("parent")
    drain_all(app)
    assert app.runs.get(run.id).result == [2, 4, 6]


def test_cancelling_a_waiting_parent_cancels_its_unfinished_children_and_starts_no_more(
    app: Runlane,
) -> None:
    parent = app.trigger("month", {"count": 6, "window": 2})
    assert drain(app, max_runs=1) == 1
    [group] = app.runs.groups(parent.id)
    assert (group.started, group.running) == (2, 2)
    app.runs.cancel(parent.id, reason="not this month")
    assert app.runs.get(parent.id).status is RunStatus.CANCELLED
    stopped = app.runs.group(group.id)
    assert stopped.status is GroupStatus.STOPPED and stopped.joined_at is not None
    children = app.runs.children(parent.id).runs
    assert [c.status for c in children] == [RunStatus.CANCELLED, RunStatus.CANCELLED]
    drain_all(app)
    assert app.runs.group(group.id).started == 2  # no child started after the cancel


def test_children_are_listed_in_item_order_a_page_at_a_time(app: Runlane) -> None:
    parent = app.trigger("month", {"count": 5})
    drain_all(app)
    first = app.runs.children(parent.id, limit=2)
    assert [r.group_index for r in first.runs] == [0, 1]
    assert first.cursor is not None
    second = app.runs.children(parent.id, limit=2, cursor=first.cursor)
    third = app.runs.children(parent.id, limit=2, cursor=second.cursor)
    assert [r.group_index for r in second.runs + third.runs] == [2, 3, 4]
    assert third.cursor is None
    [group] = app.runs.groups(parent.id)
    by_group = app.runs.children(group.id, limit=10)
    assert [r.id for r in by_group.runs] == [r.id for r in first.runs + second.runs + third.runs]


@pytest.mark.parametrize("cursor", ["nope", "9:0", "-1:2", "0:\x1b[31m", "\ud800"])
def test_a_bad_children_cursor_is_a_clear_error(app: Runlane, cursor: str) -> None:
    parent = app.trigger("month", {"count": 1})
    drain_all(app)
    with pytest.raises(InvalidCursor, match="not valid"):
        app.runs.children(parent.id, cursor=cursor)


def test_children_of_an_unknown_run_or_group_is_run_not_found(app: Runlane) -> None:
    with pytest.raises(RunNotFound):
        app.runs.children("0" * 32)


def test_a_chain_hands_each_result_to_the_next_task(app: Runlane) -> None:
    def add_one(ctx: TaskContext, payload: Any) -> Any:
        return payload + 1

    app.task(add_one, name="add-one")
    first = app.chain(("square", {"n": 3}), "add-one", "add-one")
    drain_all(app)
    second = next_group_id(first.id)
    third = next_group_id(second)
    runs = [app.runs.get(child_run_id(g, 0)) for g in (first.id, second, third)]
    assert [r.result for r in runs] == [9, 10, 11]
    assert [r.payload for r in runs[1:]] == [9, 10]
    assert app.store.groups.get_group(next_group_id(third)) is None  # it ends there


def test_a_chain_stops_at_a_step_that_fails(app: Runlane) -> None:
    first = app.chain(("square", {"n": 1, "fail": True}), "square")
    drain_all(app)
    assert app.runs.get(child_run_id(first.id, 0)).status is RunStatus.FAILED
    assert app.store.groups.get_group(next_group_id(first.id)) is None


def test_a_chain_with_a_step_that_is_not_registered_is_refused_before_anything_is_written(
    app: Runlane,
) -> None:
    with pytest.raises(UnknownTaskError):
        app.chain(("square", {"n": 1}), "square", "missing")
    assert app.runs.list().runs == []


def test_a_map_a_chord_and_a_chain_complete_on_either_worker(
    app: Runlane, handlers: Handlers, worker_kind: WorkerKind
) -> None:
    async def async_parent(ctx: TaskContext, payload: Any) -> Any:
        results = await ctx.group_async(
            [("square", {"n": 2}), ("square", {"n": 3})], max_in_flight=1
        )
        return list(results.results())

    app.task(async_parent, name="async-parent")
    parent = app.trigger("month", {"count": 6, "window": 4})
    other = app.trigger("async-parent")
    chord = app.group([("square", {"n": n}) for n in range(3)], then=("notify", "done"))
    chain = app.chain(("square", {"n": 4}), "square-of")
    while worker_kind.drain(app, concurrency=3):
        pass
    assert app.runs.get(parent.id).result["sum"] == sum(n * n for n in range(6))
    assert app.runs.get(other.id).result == [4, 9]
    assert handlers.callbacks == [("done", "succeeded", [0, 1, 4])]
    assert app.runs.get(child_run_id(next_group_id(chain.id), 0)).result == 256
    assert app.store.groups.get_group(chord.id).joined_at is not None


class Flaky:
    """Items listed in ``broken`` fail until they are fixed; counts executions by item."""

    def __init__(self) -> None:
        self.broken: set[int] = set()
        self.executions: dict[int, int] = {}

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        n = payload["n"]
        self.executions[n] = self.executions.get(n, 0) + 1
        if n in self.broken:
            raise ValueError(f"item {n} is broken")
        return n * 10


@pytest.fixture
def flaky(app: Runlane) -> Flaky:
    flaky = Flaky()
    app.task(flaky, name="flaky")

    def mapper(ctx: TaskContext, payload: Any) -> Any:
        results = ctx.map("flaky", [{"n": n} for n in range(payload["count"])], max_in_flight=3)
        return list(results.results())

    app.task(mapper, name="mapper", retry=RetryPolicy(max_attempts=1))
    return flaky


def test_retry_failed_reruns_only_the_failed_children_and_runs_the_failed_parent_again(
    app: Runlane, flaky: Flaky
) -> None:
    flaky.broken = {1}
    parent = app.trigger("mapper", {"count": 6})
    drain_all(app)
    failed = app.runs.get(parent.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and failed.failure.type == qualified(GroupFailed)

    flaky.broken = set()
    group = app.runs.retry_failed(parent.id, reason="fixed the bug", actor="ana")
    assert group.generation == 1
    drain_all(app)
    # the failed item ran again; no item that had succeeded did (the group failed at
    # item 1, so the items it had not started, or asked to cancel, ran once, now)
    assert flaky.executions == {0: 1, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1}
    assert app.runs.get(parent.id).status is RunStatus.FAILED  # its history stays
    again = app.runs.get(redriven_parent_id(group.id, 1))
    assert again.status is RunStatus.SUCCEEDED
    assert again.result == [0, 10, 20, 30, 40, 50]
    assert (again.source_run_id, again.source_kind) == (parent.id, "redrive")
    rerun = app.runs.get(app.runs.group(group.id).child_id(1))
    assert rerun.source_run_id == child_run_id(group.id, 1)
    assert [r.status for r in app.runs.children(parent.id).runs] == [RunStatus.SUCCEEDED] * 6
    with pytest.raises(IllegalTransition):  # the parent no longer failed: nothing to do
        app.runs.retry_failed(group.id)


def test_retry_failed_runs_a_chord_s_callback_again(app: Runlane, handlers: Handlers) -> None:
    group = app.group(
        [("square", {"n": 1}), ("square", {"n": 2, "fail": True})], then=("notify", None)
    )
    drain_all(app)
    assert [c[1] for c in handlers.callbacks] == ["failed"]
    assert app.runs.retry_failed(group.id).generation == 1
    drain_all(app)  # the child fails the same way: the group joins again, failed
    assert [c[1] for c in handlers.callbacks] == ["failed", "failed"]
    assert app.runs.get(callback_run_id(group.id, 1)).joined_group == group.id
    with pytest.raises(IllegalTransition, match="opened no group"):
        app.runs.retry_failed(child_run_id(group.id, 0))


def test_retry_failed_refuses_a_group_that_has_not_joined_or_has_nothing_to_rerun(
    app: Runlane, flaky: Flaky
) -> None:
    parent = app.trigger("mapper", {"count": 4})
    assert drain(app, max_runs=1) == 1
    with pytest.raises(IllegalTransition):  # still running
        app.runs.retry_failed(parent.id)
    drain_all(app)
    with pytest.raises(IllegalTransition):  # every child succeeded (and the parent too)
        app.runs.retry_failed(parent.id)
    with pytest.raises(RunNotFound):
        app.runs.retry_failed("0" * 32)


def test_maintenance_creates_a_child_whose_finisher_died_after_claiming_it(
    app: Runlane, backend: Backend, handlers: Handlers
) -> None:
    group = app.group(
        [("square", {"n": n}) for n in range(2)], then=("notify", None), max_in_flight=1
    )
    groups = app.engine.groups
    create = groups._create_child
    dies = [True]

    def dying(*args: Any, **kwargs: Any) -> Any:
        if dies.pop() if dies else False:
            raise StorageUnavailable("the finisher's process died here")
        return create(*args, **kwargs)

    groups._create_child = dying  # type: ignore[method-assign]
    drain_all(app)  # child 0 runs; its finisher starts item 1 in its lane and dies
    stuck = app.runs.group(group.id)
    assert (stuck.started, stuck.finished, handlers.callbacks) == (2, 1, [])
    assert app.store.get_run(child_run_id(group.id, 1)) is None
    backend.clock.advance(app.config.republish.after * 2)
    assert app.maintenance.run_pass().job("groups").acted == 1
    drain_all(app)
    assert [c[1:] for c in handlers.callbacks] == [("succeeded", [0, 1])]


def test_a_count_whose_response_is_lost_lands_once_and_its_next_child_is_created(
    app: Runlane, backend: Backend, handlers: Handlers
) -> None:
    group = app.group(
        [("square", {"n": n}) for n in range(3)], then=("notify", None), max_in_flight=1
    )
    groups = app.store.groups
    count = groups.count
    lost = [True]

    def losing(*args: Any, **kwargs: Any) -> Any:
        counted = count(*args, **kwargs)
        if lost.pop() if lost else False:
            raise StorageUnavailable("the count landed; its response did not arrive")
        return counted

    groups.count = losing  # type: ignore[method-assign]
    drain_all(app)  # child 0 is counted and item 1 started, but nobody heard of it
    assert app.store.get_run(child_run_id(group.id, 1)) is None
    finished = app.runs.get(child_run_id(group.id, 0))
    app.engine.finisher.after_finished(finished)  # the finish, replayed
    assert app.runs.group(group.id).succeeded == 1  # counted once
    backend.clock.advance(app.config.republish.after * 2)
    assert app.maintenance.run_pass().job("groups").acted == 1
    drain_all(app)
    assert [c[1:] for c in handlers.callbacks] == [("succeeded", [0, 1, 4])]
    stored = app.runs.group(group.id)
    assert (stored.succeeded, stored.started, dict(stored.lanes)) == (3, 3, {})


def test_children_and_callbacks_get_the_concurrency_key_a_trigger_would_give_them(
    app: Runlane,
) -> None:
    def charge(ctx: TaskContext, payload: Any) -> Any:
        return payload["account"]

    app.task(charge, name="keyed", concurrency_key=lambda p: p["account"], key_limit=1)
    group = app.group(
        [("keyed", {"account": "a"}), ("keyed", {"account": "b"})],
        then=("keyed", {"account": "c"}),
    )
    drain_all(app)
    runs = [app.runs.get(child_run_id(group.id, i)) for i in range(2)]
    runs.append(app.runs.get(callback_run_id(group.id)))
    assert [r.concurrency_key for r in runs] == ["a", "b", "c"]
    with pytest.raises(InvalidKeyError):  # refused before anything is written
        app.group([("keyed", {"no": "account"})])


def test_a_map_over_pages_reads_them_once_and_keeps_them_out_of_the_parent(
    app: Runlane, handlers: Handlers
) -> None:
    pages_read: list[int] = []

    def pages() -> Any:
        for page in range(3):  # an API read a page at a time, in the first attempt only
            pages_read.append(page)
            yield from ({"n": page * 2 + n} for n in range(2))

    def paged(ctx: TaskContext, payload: Any) -> Any:
        handlers.parent_attempts += 1
        results = ctx.map("square", pages(), max_in_flight=2)
        return sum(r for r in results.results() if r is not None)

    app.task(paged, name="paged")
    run = app.trigger("paged")
    drain_all(app)
    assert app.runs.get(run.id).result == sum(n * n for n in range(6))
    assert handlers.parent_attempts == 2 and pages_read == [0, 1, 2]  # not read again


@ONLY_AWS
def test_a_map_of_100_000_items_keeps_the_parent_s_item_small(app: Runlane, dynamodb: Any) -> None:
    """Emulators only: sizes the parent's raw DynamoDB item once it waits for its map."""

    def big(ctx: TaskContext, payload: Any) -> Any:
        return ctx.map("square", ({"n": n} for n in range(100_000)), max_in_flight=2).total

    app.task(big, name="big")
    run = app.trigger("big")
    assert drain(app, max_runs=1) == 1  # the parent opens the group and is released
    item = dynamodb.get_item(
        TableName=app.config.table,
        Key=keys.run_key(app.config.environment, run.id),
        ConsistentRead=True,
    )["Item"]
    assert item_bytes(item) < 8_000
    group = app.runs.group(group_id_for(run.id, "group:#1"))
    assert (group.total, group.started, len(group.bounds)) == (100_000, 2, 9)  # 2.5 MB
    app.runs.cancel(run.id)
    assert app.runs.group(group.id).status is GroupStatus.STOPPED


def test_a_group_past_the_item_limit_is_refused_before_anything_is_written(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_groups, "GROUP_BYTES", 1_000)
    with pytest.raises(PayloadTooLarge):
        app.group([("square", {"n": n, "pad": "x" * 50}) for n in range(100)])
    assert app.runs.list().runs == []


# pruning and retention ------------------------------------------------------------------


def group_items(app: Runlane) -> Counter[str]:
    """How many items (its record and its item chunks) each group has in the table, by
    group id, as a scan of the whole table finds them."""
    prefix = keys.group_pk(app.config.environment, "")
    return Counter(
        item["pk"]["S"][len(prefix) :]
        for item in scan_items(app.store.client, app.config.table)
        if item["pk"]["S"].startswith(prefix)
    )


def expire_by_ttl(app: Runlane) -> set[str]:
    """Delete what DynamoDB's TTL may delete by now (items whose ``expires_at`` has
    passed); returns the ids of the runs deleted."""
    client, now = app.store.client, app.clock.now().timestamp()
    prefix = keys.run_pk(app.config.environment, "")
    deleted: set[str] = set()
    for item in scan_items(client, app.config.table):
        if "expires_at" in item and int(item["expires_at"]["N"]) <= now:
            key = {"pk": item["pk"], "sk": item["sk"]}
            client.delete_item(TableName=app.config.table, Key=key)
            if item["pk"]["S"].startswith(prefix):
                deleted.add(item["pk"]["S"][len(prefix) :])
    return deleted


def prune_everything_finished(app: Runlane) -> int:
    """Prune every finished run until a prune deletes nothing more."""
    deleted = 0
    while pruned := app.runs.prune(older_than=timedelta(0)).deleted:
        deleted += pruned
    return deleted


def test_prune_deletes_the_groups_of_the_parents_it_deletes_and_no_other(
    app: Runlane, backend: Backend
) -> None:
    app.task(lambda ctx, key: ctx.wait_for_signal(key).payload, name="hold")
    app.task(lambda ctx, key: list(ctx.map("hold", [key, key]).results()), name="holding")
    done = app.trigger("month", {"count": 3})
    empty = app.trigger("month", {"count": 0})  # its group joined at once, never waited for
    waiting = app.trigger("holding", "go")  # its children wait for a signal
    drain_all(app)
    statuses = [app.runs.get(run.id).status for run in (done, empty, waiting)]
    assert statuses == [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.RELEASED]
    backend.clock.advance(timedelta(days=2))
    recent = app.trigger("month", {"count": 2})
    drain_all(app)
    group = {run.id: group_id_for(run.id, "group:#1") for run in (done, empty, waiting, recent)}
    before = group_items(app)
    assert set(before) == set(group.values())

    report = app.runs.prune(older_than=timedelta(days=1))

    assert report.deleted == 5  # the two old parents that finished, and three children
    assert app.store.get_run(done.id) is None and app.store.get_run(empty.id) is None
    # the groups of the unfinished parent and of the recent one are untouched
    kept = (group[waiting.id], group[recent.id])
    assert group_items(app) == {group_id: before[group_id] for group_id in kept}
    assert app.signals.send("go", 7) == 2
    drain_all(app)
    assert app.runs.get(waiting.id).result == [7, 7]


def test_no_group_outlives_its_parent_under_the_ttl_and_prune_deletes_both(
    app: Runlane, backend: Backend
) -> None:
    parent = app.trigger("month", {"count": 2})
    plain = app.trigger("square-of", 3)
    drain_all(app)
    [group] = app.runs.groups(parent.id)
    children = {group.child_id(0), group.child_id(1)}
    assert app.config.retention is not None
    backend.clock.advance(app.config.retention + timedelta(days=1))

    expired = expire_by_ttl(app)

    assert expired == {plain.id} | children  # children are runs of their own
    assert app.store.get_run(parent.id) is not None  # kept until pruned, with its group
    assert app.runs.groups(parent.id) == [group]
    assert prune_everything_finished(app) == 1
    assert group_items(app) == {}


def test_prune_leaves_a_parent_whose_group_a_retry_failed_rerun_still_uses(
    app: Runlane, flaky: Flaky
) -> None:
    flaky.broken = {1}
    parent = app.trigger("mapper", {"count": 3})
    drain_all(app)
    flaky.broken = set()
    group = app.runs.retry_failed(parent.id)
    app.runs.prune(older_than=timedelta(0), statuses=["failed"])
    assert app.store.get_run(parent.id) is not None  # its rerun children are running
    drain_all(app)
    again = app.runs.get(redriven_parent_id(group.id, 1))  # finds the group of its source
    assert again.result == [0, 10, 20]
    app.runs.prune(older_than=timedelta(0), statuses=["failed"])
    assert app.store.get_run(parent.id) is not None  # the parent run again is stored

    prune_everything_finished(app)

    assert app.store.get_run(parent.id) is None and app.store.get_run(again.id) is None
    assert group_items(app) == {}


def _end_elsewhere(app: Runlane, held: Run, result: Any = None) -> Run:
    """The attempt another worker holds returns (its finish, then its count)."""
    assert held.lease is not None
    ended = app.store.apply(
        machine.record_success(held, token=held.lease.token, result=result, now=app.clock.now())
    )
    app.engine.finisher.after_finished(ended)
    return ended


def test_a_failed_group_joins_once_the_children_it_asked_to_cancel_have_ended(
    app: Runlane, flaky: Flaky
) -> None:
    flaky.broken = {0}
    parent = app.trigger("mapper", {"count": 4})
    assert drain(app, max_runs=1) == 1
    [group] = app.runs.groups(parent.id)
    held = claim_elsewhere(app, child_run_id(group.id, 1))  # another worker runs item 1
    drain_all(app)  # item 0 fails: the group fails, item 2 is cancelled, item 1 asked to
    closing = app.runs.group(group.id)
    assert closing.status is GroupStatus.FAILED and dict(closing.lanes) == {1: 1}
    assert app.runs.get(held.id).status is RunStatus.CANCEL_REQUESTED
    assert closing.joined_at is None  # nobody sees the group before item 1 has ended
    assert app.runs.get(parent.id).status is RunStatus.RELEASED
    with pytest.raises(IllegalTransition, match="is released"):  # (waiting for its group)
        app.runs.retry_failed(parent.id)  # it would rerun item 0 beside a running item 1
    with pytest.raises(IllegalTransition, match="still running"):
        core_groups.redrive(closing.with_changes(joined_at=app.clock.now()), [])

    assert _end_elsewhere(app, app.runs.get(held.id)).status is RunStatus.CANCELLED
    drain_all(app)
    joined = app.runs.group(group.id)
    assert (joined.failed, joined.cancelled, joined.joined_at is not None) == (1, 2, True)
    failed = app.runs.get(parent.id)
    assert failed.status is RunStatus.FAILED
    assert failed.waiting is None and "1 failed and 2 cancelled" in str(failed.failure)

    flaky.broken = set()
    assert app.runs.retry_failed(parent.id).generation == 1  # items 0, 1, 2 and 3 again
    drain_all(app)
    assert app.runs.get(redriven_parent_id(group.id, 1)).result == [0, 10, 20, 30]
    assert flaky.executions == {0: 2, 1: 1, 2: 1, 3: 1}


def test_a_retry_failed_that_loses_to_another_is_refused_as_illegal(
    app: Runlane, flaky: Flaky
) -> None:
    flaky.broken = {0}
    parent = app.trigger("mapper", {"count": 2})
    drain_all(app)
    groups = app.store.groups
    groups.reopen = lambda *args, **kwargs: False  # type: ignore[method-assign]
    with pytest.raises(IllegalTransition, match="reopened meanwhile"):
        app.runs.retry_failed(parent.id)


def test_maintenance_leaves_a_group_that_retry_failed_reopened_running(
    app: Runlane, backend: Backend, flaky: Flaky
) -> None:
    flaky.broken = {1}
    parent = app.trigger("mapper", {"count": 3})
    assert drain(app, max_runs=1) == 1
    [group] = app.runs.groups(parent.id)
    listed = app.runs.group(group.id)  # what a maintenance pass read from the agenda
    drain_all(app)
    assert app.runs.get(parent.id).status is RunStatus.FAILED
    flaky.broken = set()
    app.runs.retry_failed(parent.id)
    # a pass that read the group before it joined, and one that reads it reopened (its
    # parent failed: no cancel to follow), leave it running
    app.engine.groups.review(listed, app.clock.now())
    backend.clock.advance(app.config.republish.after * 2)
    app.maintenance.run_pass()
    assert app.runs.group(group.id).stopped_at is None
    drain_all(app)
    assert app.runs.get(redriven_parent_id(group.id, 1)).result == [0, 10, 20]


def test_a_child_started_as_its_group_fails_is_created_cancelled_and_never_runs(
    app: Runlane, backend: Backend, handlers: Handlers
) -> None:
    app.task(handlers.square, name="square-once", retry=RetryPolicy(max_attempts=1))
    items = [("square-once", {"n": 0, "fail": True}), ("square", {"n": 1}), ("square", {"n": 2})]
    group = app.group(items, then=("notify", None), max_in_flight=2)
    groups = app.engine.groups
    create = groups._create_child
    dies = [True]

    def dying(*args: Any, **kwargs: Any) -> Any:
        if dies.pop() if dies else False:
            raise StorageUnavailable("the finisher's process died here")
        return create(*args, **kwargs)

    groups._create_child = dying  # type: ignore[method-assign]
    held = claim_elsewhere(app, child_run_id(group.id, 1))
    _end_elsewhere(app, held, 1)  # item 1 is counted and item 2 started in its lane; its
    # finisher dies before it creates item 2 (maintenance would create it)
    assert app.store.get_run(child_run_id(group.id, 2)) is None
    drain_all(app)  # item 0 fails: the group fails
    backend.clock.advance(app.config.republish.after * 2)
    app.maintenance.run_pass()
    drain_all(app)
    third = app.runs.get(child_run_id(group.id, 2))
    assert third.status is RunStatus.CANCELLED and third.attempt == 0  # never ran
    joined = app.runs.group(group.id)
    assert (joined.succeeded, joined.failed, joined.cancelled) == (1, 1, 1)
    assert [c[1:] for c in handlers.callbacks] == [("failed", [None, 1, None])]


def test_a_child_claimed_while_its_failed_group_cancels_it_is_asked_to_cancel(
    app: Runlane, handlers: Handlers
) -> None:
    app.task(handlers.square, name="square-once", retry=RetryPolicy(max_attempts=1))
    items = [("square-once", {"n": 0, "fail": True}), ("square", {"n": 1})]
    group = app.group(items, then=("notify", None), max_in_flight=2)
    second = child_run_id(group.id, 1)
    apply = app.store.apply
    claims = [second]

    def claimed_first(transition: Any) -> Any:
        if transition.after.id in claims:  # a worker claims it just before the
            claims.clear()  # group's cancel lands
            claim_elsewhere(app, second)
        return apply(transition)

    app.store.apply = claimed_first  # type: ignore[method-assign]
    drain(app, max_runs=1)  # item 0 fails: the group fails and cancels item 1
    assert not claims and app.runs.get(second).status is RunStatus.CANCEL_REQUESTED
    assert app.runs.group(group.id).joined_at is None
    assert _end_elsewhere(app, app.runs.get(second), 1).status is RunStatus.CANCELLED
    drain_all(app)
    assert [c[1:] for c in handlers.callbacks] == [("failed", [None, None])]


def test_retry_failed_waits_for_the_callback_of_the_last_join_which_reads_the_group(
    app: Runlane, handlers: Handlers
) -> None:
    group = app.group(
        [("square", {"n": 1}), ("square", {"n": 2, "fail": True})], then=("notify", None)
    )
    callback = callback_run_id(group.id)
    held = claim_elsewhere(app, child_run_id(group.id, 0))
    drain_all(app)  # item 1 fails; item 0, held elsewhere, is asked to cancel
    _end_elsewhere(app, app.runs.get(held.id), 1)  # it ends: the group joins
    running = claim_elsewhere(app, callback)  # the callback runs: it reads the group
    with pytest.raises(IllegalTransition, match="callback"):
        app.runs.retry_failed(group.id)
    assert app.runs.group(group.id).generation == 0
    assert _end_elsewhere(app, running).status is RunStatus.SUCCEEDED
    assert app.runs.retry_failed(group.id).generation == 1
