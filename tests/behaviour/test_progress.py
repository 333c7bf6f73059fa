"""What a running attempt reports about itself (``ctx.progress``, ``ctx.set_state``):
durable, coalesced to at most one write per run per interval, the last report riding on
the outcome's write, and refused from a stale attempt (PRODUCT.md, semantic 29;
docs/progress.md).

Writes are counted where they arrive: at the in-memory DynamoDB, which answers the very
requests the DynamoDB adapter sends. Time is the test's manual clock; the handler asks
the worker's keeper to flush after every report, as a keeper woken at every report
would, so only the coalescing decides how many writes there are.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    ConfigurationError,
    InvalidPayloadError,
    LeaseLost,
    ManualClock,
    Run,
    RunStatus,
    TaskContext,
)
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.aio import AsyncWorker
from runlane_sqs.api.waiting import wait_for
from runlane_sqs.compat.celery import AsyncResult, Celery
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import new_lease_token
from runlane_sqs.core.progress import MAX_STATE_BYTES, AttemptReport, checked_progress
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.lambdas.consumer import sqs_handler
from runlane_sqs.runtime.worker import Worker
from runlane_sqs.testing import InMemoryRunStore, in_memory_app
from tests.behaviour.console_support import client_for
from tests.processes.test_lambda_consumer import FakeContext, sqs_record

TASK = "progress.count"
LEASE = timedelta(minutes=5)
"""Long in real time too: the keeper's heartbeats never fire during a test."""


class Writes:
    """The ``UpdateItem`` requests the in-memory DynamoDB received, sorted by kind."""

    def __init__(self, store: InMemoryRunStore) -> None:
        self.requests: list[dict[str, Any]] = []
        send = store.dynamodb.update_item

        def counted(**request: Any) -> dict[str, Any]:
            self.requests.append(request)
            return send(**request)

        store.dynamodb.update_item = counted  # type: ignore[method-assign]

    @staticmethod
    def _names(request: dict[str, Any]) -> set[str]:
        return set(request.get("ExpressionAttributeNames", {}).values())

    @property
    def reports(self) -> list[dict[str, Any]]:
        """Writes of a report alone: no event, ``seq`` untouched."""
        return [
            r
            for r in self.requests
            if "seq" not in self._names(r) and self._names(r) & {"progress", "state"}
        ]

    @property
    def outcomes_carrying_a_report(self) -> list[dict[str, Any]]:
        return [
            r
            for r in self.requests
            if {"seq", "status"} <= self._names(r) and self._names(r) & {"progress", "state"}
        ]


def counting_app(clock: ManualClock, **settings: Any) -> tuple[Any, Writes]:
    app = in_memory_app(clock=clock, lease_duration=LEASE, **settings)
    assert isinstance(app.store, InMemoryRunStore)
    return app, Writes(app.store)


def reporting_task(
    app: Any, worker: Callable[[], Worker], clock: ManualClock, reports: int, every: timedelta
) -> None:
    """A task reporting ``reports`` times, ``every`` apart by the manual clock, the
    worker's keeper flushing after each report."""

    @app.task(name=TASK)
    def count(ctx: TaskContext, payload: Any) -> str:
        for done in range(1, reports + 1):
            clock.advance(every)
            ctx.progress(done, reports, message=f"item {done}")
            worker().leases.flush()
        return "counted"


def drain_reporting(clock: ManualClock, reports: int, every: timedelta) -> tuple[Run, Writes]:
    app, writes = counting_app(clock)
    worker = app.worker()
    reporting_task(app, lambda: worker, clock, reports, every)
    run = app.trigger(TASK, {})
    assert worker.drain() == 1
    return app.runs.get(run.id), writes


def test_a_thousand_reports_in_ten_seconds_make_at_most_six_writes(clock: ManualClock) -> None:
    run, writes = drain_reporting(clock, 1_000, timedelta(milliseconds=10))

    assert run.status is RunStatus.SUCCEEDED
    # the first report at once, then one every 2 s: 0, 2, 4, 6, 8 s (and maybe 10 s)
    assert 5 <= len(writes.reports) <= 6
    assert run.progress is not None
    assert (run.progress.done, run.progress.total) == (1_000, 1_000)
    assert run.progress.message == "item 1000"


def test_reporting_every_millisecond_costs_no_more_than_every_interval(
    clock: ManualClock,
) -> None:
    _, often = drain_reporting(clock, 10_000, timedelta(milliseconds=1))
    _, seldom = drain_reporting(ManualClock(), 5, timedelta(seconds=2))

    assert len(often.reports) <= len(seldom.reports)


def test_the_last_report_rides_on_the_outcome_with_no_extra_write(clock: ManualClock) -> None:
    run, writes = drain_reporting(clock, 1_000, timedelta(milliseconds=10))
    plain, plain_writes = drain_reporting(ManualClock(), 0, timedelta(0))

    # claim + reports + outcome: the last report is on the outcome's own write
    assert len(writes.requests) == len(plain_writes.requests) + len(writes.reports)
    assert len(writes.outcomes_carrying_a_report) == 1
    assert run.progress is not None and run.progress.done == 1_000
    assert plain.progress is None and plain_writes.reports == []


def test_state_is_kept_and_the_last_value_wins(clock: ManualClock) -> None:
    app, writes = counting_app(clock)

    @app.task(name=TASK)
    def stateful(ctx: TaskContext, payload: Any) -> None:
        for n in range(100):
            ctx.set_state({"page": n, "cursor": f"c{n}"})
        ctx.set_state({"page": "last"})

    run = app.trigger(TASK, {})
    app.worker().drain()

    stored = app.runs.get(run.id)
    assert stored.state == {"page": "last"}
    assert len(writes.reports) <= 1  # the first at once at most, the rest on the outcome


def test_a_report_pending_when_the_handler_stops_reporting_is_written_within_the_interval(
    clock: ManualClock,
) -> None:
    """The keeper's own thread writes it (nothing calls flush by hand here): a reader in
    another process sees it while the handler is still working."""
    app, writes = counting_app(clock, progress_interval=0.2)
    seen: list[Run] = []

    def written(count: int, ctx: TaskContext) -> None:
        for _ in range(200):  # real time: the keeper's thread wakes for the report
            if len(writes.reports) >= count:
                return
            ctx.cancellation.wait(0.05)

    @app.task(name=TASK)
    def slow(ctx: TaskContext, payload: Any) -> None:
        ctx.progress(1, 3)  # due at once
        written(1, ctx)
        ctx.progress(2, 3)  # pending: due 0.2 s after the first write by the clock
        clock.advance(0.2)
        written(2, ctx)
        seen.append(app.runs.get(ctx.run_id))

    app.trigger(TASK, {})
    app.worker().drain()

    assert len(writes.reports) == 2
    assert seen[0].progress is not None and seen[0].progress.done == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_async_handlers_report_too(clock: ManualClock, kind: str) -> None:
    app, _ = counting_app(clock)

    @app.task(name=TASK)
    async def reporting(ctx: TaskContext, payload: Any) -> str:
        for done in range(1, 51):
            ctx.progress(done, 50)
            await asyncio.sleep(0)
        ctx.set_state(["done"])
        return "ok"

    run = app.trigger(TASK, {})
    if kind == "sync":
        app.worker().drain()
    else:
        asyncio.run(AsyncWorker(app).drain())

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.SUCCEEDED
    assert stored.progress is not None and stored.progress.done == 50
    assert stored.state == ["done"]


def test_a_stale_attempts_report_is_refused(clock: ManualClock) -> None:
    app, _ = counting_app(clock)
    app.task(lambda ctx, payload: None, name=TASK)
    run = app.trigger(TASK, {})

    def claim(current: Run, owner: str) -> Run:
        decision = machine.claim_lease(
            current, now=clock.now(), owner=owner, token=new_lease_token(), duration=LEASE
        )
        assert isinstance(decision, Transition)
        return app.store.apply(decision)

    a_view = claim(run, "worker-a")
    assert a_view.lease is not None
    a_token = a_view.lease.token
    report = AttemptReport(progress=checked_progress(1, 2, None, attempt=1, now=clock.now()))
    app.store.report_progress(a_view, a_token, report)  # A's report, under its lease
    clock.advance(LEASE + timedelta(seconds=1))
    expired = expire_lease(app.store.get_run(run.id), now=clock.now())
    assert isinstance(expired, Transition)
    app.store.apply(expired)
    b_view = claim(app.runs.get(run.id), "worker-b")
    assert b_view.lease is not None

    stale = AttemptReport(progress=checked_progress(2, 2, "zombie", attempt=1, now=clock.now()))
    with pytest.raises(LeaseLost):
        app.store.report_progress(a_view, a_token, stale)
    fresh = AttemptReport(progress=checked_progress(1, 9, None, attempt=2, now=clock.now()))
    app.store.report_progress(b_view, b_view.lease.token, fresh)

    stored = app.runs.get(run.id)
    assert stored.progress is not None
    assert (stored.progress.done, stored.progress.total, stored.progress.attempt) == (1, 9, 2)


def test_a_refused_report_is_logged_and_never_fails_the_handler(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Another worker takes the run over while the handler works; the handler's next
    report is refused by the store, logged, and the handler goes on to return."""
    app, writes = counting_app(clock)
    worker = app.worker()
    finished: list[bool] = []

    @app.task(name=TASK)
    def overtaken(ctx: TaskContext, payload: Any) -> str:
        clock.advance(LEASE + timedelta(seconds=1))
        stored = app.store.get_run(ctx.run_id)
        expired = expire_lease(stored, now=clock.now())
        assert isinstance(expired, Transition)
        app.store.apply(expired)
        taken = machine.claim_lease(
            app.store.get_run(ctx.run_id),
            now=clock.now(),
            owner="worker-b",
            token=new_lease_token(),
            duration=LEASE,
        )
        assert isinstance(taken, Transition)
        app.store.apply(taken)
        ctx.progress(5, 10, "after the takeover")
        worker.leases.flush()
        finished.append(True)
        return "late"

    run = app.trigger(TASK, {})
    with caplog.at_level(logging.WARNING):
        worker.drain()

    assert finished == [True]
    assert "progress report refused" in caplog.text
    stored = app.runs.get(run.id)
    assert stored.progress is None  # nothing the zombie reported was kept
    assert stored.status is RunStatus.RUNNING  # worker B's attempt is untouched
    assert len(writes.reports) == 1  # sent, and refused by its condition


def test_bad_reports_are_refused_with_a_clear_error(clock: ManualClock) -> None:
    app, _ = counting_app(clock)
    errors: list[str] = []

    @app.task(name=TASK)
    def bad(ctx: TaskContext, payload: Any) -> None:
        for call in (
            lambda: ctx.progress("3"),  # type: ignore[arg-type]
            lambda: ctx.progress(float("nan")),
            lambda: ctx.progress(1, -1),
            lambda: ctx.progress(1, 2, "x" * 501),
            lambda: ctx.progress(1, 2, "\ud800"),
            lambda: ctx.set_state({"big": "x" * MAX_STATE_BYTES}),
            lambda: ctx.set_state({1, 2}),
        ):
            try:
                call()
            except InvalidPayloadError as exc:
                errors.append(str(exc))
        ctx.progress(1, 2, "line\nwith \x1b[31mescapes\x1b[0m")  # any text is kept as is

    run = app.trigger(TASK, {})
    app.worker().drain()

    assert len(errors) == 7
    assert "progress done must be a finite number" in errors[0]
    assert "500" in errors[3]
    assert "run state is" in errors[5] and str(MAX_STATE_BYTES) in errors[5]
    stored = app.runs.get(run.id)
    assert stored.progress is not None
    assert stored.progress.message == "line\nwith \x1b[31mescapes\x1b[0m"


def test_the_interval_is_configurable_and_checked(clock: ManualClock) -> None:
    _, slow_writes = drain_reporting(clock, 1_000, timedelta(milliseconds=10))
    app, fast_writes = counting_app(ManualClock(), progress_interval=0.5)
    worker = app.worker()
    reporting_task(app, lambda: worker, app.clock, 1_000, timedelta(milliseconds=10))
    app.trigger(TASK, {})
    worker.drain()

    assert 19 <= len(fast_writes.reports) <= 21  # every 0.5 s over 10 s
    assert len(slow_writes.reports) <= 6  # every 2 s
    with pytest.raises(ConfigurationError, match="progress_interval"):
        in_memory_app(progress_interval=0.01)
    with pytest.raises(ConfigurationError, match="progress_interval"):
        in_memory_app(progress_interval=600)


HOSTILE = '<script>alert("x")</script>\x1b[31m'


def test_the_console_shows_a_run_s_progress_and_state_and_each_child_s_beside_its_group(
    clock: ManualClock,
) -> None:
    app, _ = counting_app(clock)

    @app.task(name="progress.child")
    def child(ctx: TaskContext, payload: int) -> int:
        ctx.progress(payload, 4, message=f"child {payload} {HOSTILE}")
        ctx.set_state({"child": payload})
        return payload

    @app.task(name="progress.parent")
    def parent_task(ctx: TaskContext, payload: Any) -> int:
        ctx.progress(0, 3, message="mapping")
        return sum(ctx.map("progress.child", [1, 2, 3]).results())

    parent = app.trigger("progress.parent")
    while app.worker().drain():
        pass

    with client_for(app) as client:
        page = client.get(f"/runs/{parent.id}").text
        rows = page.split('class="child-row"')[1:]
        child_id = re.findall(r'<a href="/runs/([0-9a-f]{32})">', rows[0])[0]
        child_page = client.get(f"/runs/{child_id}").text

    assert "3 of 3 finished: 3 succeeded" in page  # the counts, as before
    assert len(rows) == 3
    for n, row in enumerate(rows, start=1):
        assert f'<td class="child-progress"><progress max="1" value="{n / 4}">' in row
        assert f"{n} of 4 ({n / 4:.0%}): child {n} &lt;script&gt;" in row
    assert 'id="progress-summary">0 of 3 (0%): mapping</span>' in page
    assert "<script>alert" not in child_page and "&lt;script&gt;alert" in child_page
    assert 'id="state">{\n  &#34;child&#34;: 1\n}</pre>' in child_page


def test_wait_calls_back_on_each_change_of_progress(clock: ManualClock) -> None:
    app, _ = counting_app(clock)
    reads: list[Run] = []
    app.task(lambda ctx, payload: None, name=TASK)
    run = app.trigger(TASK, {})
    claimed = machine.claim_lease(
        run, now=clock.now(), owner="w", token=new_lease_token(), duration=LEASE
    )
    assert isinstance(claimed, Transition)
    view = app.store.apply(claimed)
    assert view.lease is not None
    token = view.lease.token
    script = iter(range(1, 100))

    def read_again(delay: float) -> None:
        """Between polls the attempt reports, reports the same again, then finishes."""
        step = next(script)
        if step <= 3:
            report = checked_progress(step, 3, None, attempt=1, now=clock.now())
            app.store.report_progress(view, token, AttemptReport(progress=report))
        elif step == 5:
            app.store.apply(
                machine.record_success(
                    app.store.get_run(run.id), token=token, result=None, now=clock.now()
                )
            )

    finished = wait_for(
        lambda: app.runs.get_stored(run.id), None, sleep=read_again, on_progress=reads.append
    )

    assert finished.status is RunStatus.SUCCEEDED
    assert [r.progress.done for r in reads if r.progress] == [1, 2, 3]


def test_a_run_page_follows_itself_while_the_run_is_unfinished_and_stops_after(
    clock: ManualClock,
) -> None:
    """The page of a running run carries the marker console.js follows (it reads the page
    again and swaps its status, facts, state and groups in place); the page of the
    finished run does not, so the following stops."""
    app, _ = counting_app(clock)
    pages: list[str] = []

    with client_for(app) as client:

        @app.task(name=TASK)
        def watched(ctx: TaskContext, payload: Any) -> None:
            ctx.progress(1, 2, "half")
            ctx.set_state({"half": True})
            pages.append(client.get(f"/runs/{ctx.run_id}").text)

        run = app.trigger(TASK, {})
        app.worker().drain()
        finished = client.get(f"/runs/{run.id}").text

    running = pages[0]
    assert 'data-live-progress="2"' in running
    for part in ('id="run-status"', 'id="facts"', 'id="state-live"', 'id="groups-live"'):
        assert part in running and part in finished
    assert "data-live-progress" not in finished
    assert "running" in running.split('id="run-status"')[1][:40]
    assert 'id="progress-summary">1 of 2 (50%): half</span>' in finished  # rode the outcome


def test_the_lambda_consumer_writes_the_last_report_with_the_outcome(clock: ManualClock) -> None:
    app, writes = counting_app(clock)

    @app.task(name=TASK)
    def reporting(ctx: TaskContext, payload: Any) -> str:
        for done in range(1, 101):
            ctx.progress(done, 100)
        ctx.set_state({"pages": 100})
        return "ok"

    run = app.trigger(TASK, {})
    assert isinstance(app.transport, InMemoryTransport)
    [message] = app.transport.receive("default", 10, 0)
    handler = sqs_handler(app, safety_margin_seconds=10)

    response = handler({"Records": [sqs_record(message)]}, FakeContext(clock, 60, "req-1"))

    assert response == {"batchItemFailures": []}
    stored = app.runs.get(run.id)
    assert stored.progress is not None and stored.progress.done == 100
    assert stored.state == {"pages": 100}
    assert len(writes.reports) <= 1  # the first report at most; the rest on the outcome
    assert len(writes.outcomes_carrying_a_report) == 1


def test_celery_s_update_state_is_progress_and_state_read_back_by_async_result(
    clock: ManualClock,
) -> None:
    """The Celery idiom of a progress bar (``self.update_state(state="PROGRESS", meta=
    {"current": i, "total": n})`` read through ``AsyncResult.state`` and ``.info``)
    works on the compat layer, as progress and state."""
    runlane, _ = counting_app(clock)
    celery = Celery("shop", runlane=runlane)
    seen: list[tuple[str, Any]] = []
    worker = runlane.worker()

    @celery.task(bind=True)
    def export(self: Any, pages: int) -> int:
        for page in range(1, pages + 1):
            self.update_state(state="PROGRESS", meta={"current": page, "total": pages})
            worker.leases.flush()  # the first is written at once, the rest wait 2 s
        result = AsyncResult(self.request.id, celery)
        seen.append((result.state, result.info))
        with pytest.raises(ConfigurationError, match="calling run"):
            self.update_state(task_id="0" * 32, state="PROGRESS")
        return pages

    async_result = export.delay(3)
    export.update_state(state="IGNORED")  # called outside a run: nothing happens
    worker.drain()

    run = runlane.runs.get(async_result.id)
    assert run.progress is not None and (run.progress.done, run.progress.total) == (3, 3)
    assert run.state == {"celery_state": "PROGRESS", "meta": {"current": 3, "total": 3}}
    assert seen == [("PROGRESS", {"current": 1, "total": 3})]  # as written while running
    assert (async_result.state, async_result.info) == ("SUCCESS", 3)


def test_wait_async_calls_back_with_the_progress_it_finds(clock: ManualClock) -> None:
    app, _ = counting_app(clock)

    @app.task(name=TASK)
    def reporting(ctx: TaskContext, payload: Any) -> None:
        ctx.progress(7, 7, "all")

    run = app.trigger(TASK, {})
    app.worker().drain()
    reads: list[Run] = []

    finished = asyncio.run(app.runs.wait_async(run.id, on_progress=reads.append))

    assert finished.status is RunStatus.SUCCEEDED
    assert [r.progress.summary() for r in reads if r.progress] == ["7 of 7 (100%): all"]


@pytest.mark.parametrize(
    ("progress", "state"),
    [
        ('{"done":"3","total":10,"attempt":1}', "not json"),
        ('{"done":1e999,"attempt":1}', '{"a":'),
        ('{"done":1,"total":10,"message":{"x":1},"at":99999999999999999999}', "\u241b[31m"),
        ("[1,2]", '"\\u001b[31m"'),
    ],
)
def test_progress_and_state_written_behind_the_library_s_back_never_break_a_reader(
    clock: ManualClock, progress: str, state: str
) -> None:
    app, _ = counting_app(clock)
    app.task(lambda ctx, payload: None, name=TASK)
    run = app.trigger(TASK, {})
    assert isinstance(app.store, InMemoryRunStore)
    key = {"pk": {"S": f"RUN#{app.config.environment}#{run.id}"}, "sk": {"S": "RUN"}}
    for name, text in (("progress", progress), ("state", state)):
        app.store.dynamodb.update_item(
            TableName=app.config.table,
            Key=key,
            UpdateExpression="SET #a = :v",
            ExpressionAttributeNames={"#a": name},
            ExpressionAttributeValues={":v": {"S": text}},
            ConditionExpression="attribute_exists(pk)",  # the run's own item
        )

    stored = app.runs.get(run.id)
    with client_for(app) as client:
        page = client.get(f"/runs/{run.id}")

    assert stored.progress is None  # not a progress ctx.progress would have written
    assert page.status_code == 200 and "\x1b" not in page.text
