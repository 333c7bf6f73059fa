"""Runs found by their tags (docs/tags.md): a listing by tag returns exactly the runs
carrying it, newest first, across pages with cursors, read from the tag indexes with
``Query`` only, on every backend."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, Run, Runlane, Schedule
from runlane_sqs.core.bulk import BulkFilter
from runlane_sqs.core.model import RunStatus
from runlane_sqs.errors import ConfigurationError, InvalidCursor, InvalidKeyError
from tests.backends import Backend
from tests.behaviour.worker_support import drain
from tests.emulators import count_requests
from tests.otel import Recorded, recorded  # noqa: F401 (a fixture)


def register(app: Runlane) -> None:
    @app.task(name="export")
    def export(ctx: object, payload: dict[str, Any]) -> str:
        if payload.get("fail"):
            raise RuntimeError("export failed")
        return "done"


def runs_over_customers(backend: Backend, app: Runlane, runs: int, customers: int) -> list[Run]:
    """``runs`` runs spread round-robin over ``customers`` customers, ten at a time with
    ``trigger_many``, the clock a millisecond later for each ten (several runs share a
    millisecond: ties go by run id, as the index sorts them)."""
    made: list[Run] = []
    for batch in range(runs // 10):
        customer = f"c{batch % customers}"
        tags = {"customer": customer, "region": "eu" if batch % 2 else "us"}
        made += app.trigger_many("export", [{"n": batch * 10 + i} for i in range(10)], tags=tags)
        backend.clock.advance(timedelta(milliseconds=1))
    return made


def newest_first(runs: list[Run]) -> list[str]:
    return [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)]


def pages(app: Runlane, limit: int, **filters: Any) -> Iterator[list[Run]]:
    cursor = None
    while True:
        page = app.runs.list(limit=limit, cursor=cursor, **filters)
        yield page.runs
        cursor = page.cursor
        if cursor is None:
            return


def test_a_listing_by_tag_returns_exactly_that_customers_runs_newest_first(
    backend: Backend,
) -> None:
    app = backend.app(register=register)
    total, customers = (10_000, 100) if not backend.real else (300, 6)
    made = runs_over_customers(backend, app, total, customers)

    listed = [
        run
        for page in pages(app, 40, tags={"customer": "c7" if not backend.real else "c4"})
        for run in page
    ]

    customer = "c7" if not backend.real else "c4"
    expected = [r for r in made if r.tags["customer"] == customer]
    assert len(expected) == total // customers
    assert [r.id for r in listed] == newest_first(expected)
    assert all(r.tags == {"customer": customer, "region": r.tags["region"]} for r in listed)


def test_several_tags_combine_as_and(backend: Backend) -> None:
    app = backend.app(register=register)
    made = runs_over_customers(backend, app, 200, 4)  # c1's batches are all "eu"

    eu = [r for page in pages(app, 7, tags={"region": "eu", "customer": "c1"}) for r in page]
    us = [r for page in pages(app, 7, tags={"customer": "c1", "region": "us"}) for r in page]

    assert [r.id for r in eu] == newest_first(
        [r for r in made if r.tags == {"customer": "c1", "region": "eu"}]
    )
    assert eu and us == []


def test_keys_with_dots_and_colons_filter_as_any_other(backend: Backend) -> None:
    """The other tags are filtered as map paths: a key's ``.`` or ``:`` is a name, not a
    nesting (and a value may hold ``#`` and ``=``, as the partition key does)."""
    app = backend.app(register=register)
    one = app.trigger("export", {}, tags={"acme.customer": "42", "x:y": "a#b=c"})
    app.trigger("export", {}, tags={"acme.customer": "42", "x:y": "c"})

    found = app.runs.list(tags={"acme.customer": "42", "x:y": "a#b=c"}).runs
    by_value = app.runs.list(tags={"x:y": "a#b=c"}).runs

    assert [r.id for r in found] == [r.id for r in by_value] == [one.id]


def test_a_listing_by_tag_sends_queries_only(backend: Backend, monkeypatch: Any) -> None:
    app = backend.app(register=register)
    runs_over_customers(backend, app, 100, 5)
    requests = counted(backend, app, monkeypatch)

    found = [r for page in pages(app, 8, tags={"customer": "c2"}) for r in page]

    assert len(found) == 20
    assert requests["Query"] > 0 and requests["Scan"] == 0
    assert set(requests) <= {"Query", "BatchGetItem"}, requests


def test_a_status_and_a_task_narrow_a_listing_by_tag(backend: Backend) -> None:
    app = backend.app(register=register)
    ok = app.trigger("export", {}, tags={"customer": "42"})
    failing = app.trigger("export", {"fail": True}, tags={"customer": "42"})
    other = app.trigger("export", {"fail": True}, tags={"customer": "43"})
    drain(app)

    failed = app.runs.list(tags={"customer": "42"}, status="failed").runs
    every = app.runs.list(tags={"customer": "42"}, task="export").runs
    none = app.runs.list(tags={"customer": "42"}, task="other").runs

    assert [r.id for r in failed] == [failing.id]
    assert {r.id for r in every} == {ok.id, failing.id}
    assert none == []
    assert app.runs.get(other.id).status is RunStatus.FAILED


def test_a_rerun_keeps_its_sources_tags(backend: Backend) -> None:
    app = backend.app(register=register)
    source = app.trigger("export", {}, tags={"customer": "42", "order": "7"})
    drain(app)

    rerun = app.runs.rerun(source.id)

    assert rerun.tags == {"customer": "42", "order": "7"}
    assert {r.id for r in app.runs.list(tags={"order": "7"}).runs} == {source.id, rerun.id}


def test_bad_cursors_are_refused(backend: Backend) -> None:
    app = backend.app(register=register)
    runs_over_customers(backend, app, 40, 2)
    page = app.runs.list(tags={"customer": "c0"}, limit=3)
    status_page = app.runs.list(limit=3)
    assert page.cursor and status_page.cursor

    with pytest.raises(InvalidCursor, match="another tag"):
        app.runs.list(tags={"customer": "c1"}, cursor=page.cursor)
    with pytest.raises(InvalidCursor, match="not a listing position"):
        app.runs.list(tags={"customer": "c0"}, cursor=status_page.cursor)
    with pytest.raises(InvalidCursor, match="not a listing position"):
        app.runs.list(cursor=page.cursor)
    with pytest.raises(InvalidCursor):
        app.runs.list(tags={"customer": "c0"}, cursor=page.cursor[:-4] + "AAAA")


def counted(backend: Backend, app: Runlane, monkeypatch: Any) -> Counter[str]:
    """Every DynamoDB request ``app`` sends from now on, by operation."""
    if backend.real:
        return count_requests(app.client("dynamodb"))
    requests: Counter[str] = Counter()
    table = backend.table(app)
    for name, operation in (
        ("query", "Query"),
        ("scan", "Scan"),
        ("batch_get_item", "BatchGetItem"),
        ("get_item", "GetItem"),
    ):
        sent = getattr(table, name)

        def send(*args: Any, _sent: Any = sent, _operation: str = operation, **kw: Any) -> Any:
            requests[_operation] += 1
            return _sent(*args, **kw)

        monkeypatch.setattr(table, name, send)
    return requests


def test_a_runs_tags_are_on_its_spans_and_log_records(
    backend: Backend,
    recorded: Recorded,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = backend.app(register=register, telemetry=recorded.telemetry())
    caplog.set_level(logging.INFO, logger="runlane_sqs")

    run = app.trigger("export", {}, tags={"customer": "42", "order": "7"})
    drain(app)

    tagged = {"runlane.tag.customer": "42", "runlane.tag.order": "7"}
    [trigger] = recorded.spans("trigger export")
    [attempt] = recorded.spans("attempt export")
    for span in (trigger, attempt):
        attributes = dict(span.attributes or {})
        assert attributes["runlane.run.id"] == run.id
        assert {k: v for k, v in attributes.items() if k.startswith("runlane.tag.")} == tagged
    app.trigger_many("export", [{}, {}], tags={"customer": "43"})
    [batch] = [s for s in recorded.spans("trigger export") if s is not trigger]
    assert dict(batch.attributes or {})["runlane.tag.customer"] == "43"
    lines = [r for r in caplog.records if getattr(r, "run_id", None) == run.id]
    assert {r.name for r in lines} >= {"runlane_sqs", "runlane_sqs.task"}
    assert all(getattr(r, "tags", None) == {"customer": "42", "order": "7"} for r in lines), [
        (r.name, r.getMessage()) for r in lines if getattr(r, "tags", None) is None
    ]


def register_fan_out(app: Runlane) -> None:
    register(app)

    @app.task(name="fan_out")
    def fan_out(ctx: Any, payload: dict[str, Any]) -> bool:
        options = payload["options"]
        return ctx.map("export", [{"n": 1}, {"n": 2}], **options).ok


@pytest.mark.parametrize(
    ("options", "children"),
    [
        pytest.param({}, {}, id="nothing-asked"),
        pytest.param({"tags": {"step": "a"}}, {"step": "a"}, id="own-tags"),
        pytest.param(
            {"inherit_tags": True},
            {"customer": "42", "order": "7"},
            id="inherited",
        ),
        pytest.param(
            {"inherit_tags": True, "tags": {"order": "8", "step": "a"}},
            {"customer": "42", "order": "8", "step": "a"},
            id="inherited-and-own",
        ),
    ],
)
def test_children_inherit_their_parents_tags_only_when_asked(
    backend: Backend, options: dict[str, Any], children: dict[str, str]
) -> None:
    app = backend.app(register=register_fan_out)
    parent = app.trigger("fan_out", {"options": options}, tags={"customer": "42", "order": "7"})
    drain(app)

    assert app.runs.get(parent.id).status is RunStatus.SUCCEEDED
    kids = app.runs.children(parent.id).runs
    assert len(kids) == 2
    assert all(kid.tags == children for kid in kids)
    if children:
        key, value = next(iter(children.items()))
        found = {r.id for r in app.runs.list(tags={key: value}).runs}
        assert {kid.id for kid in kids} <= found


def test_a_group_from_outside_a_run_cannot_inherit(backend: Backend) -> None:
    app = backend.app(register=register)
    with pytest.raises(ConfigurationError, match="inherit_tags takes the tags of the run"):
        app.group([("export", {})], inherit_tags=True)
    with pytest.raises(InvalidKeyError, match="tag 'step'"):
        app.group([("export", {})], tags={"step": "\x00"})
    group = app.group([("export", {}), ("export", {})], tags={"batch": "b1"})
    drain(app)
    assert {r.tags["batch"] for r in app.runs.children(group.id).runs} == {"b1"}


def test_a_schedules_runs_carry_its_tags(backend: Backend) -> None:
    hourly = Schedule.every(
        "exports.hourly", timedelta(hours=1), tags={"customer": "42", "kind": "hourly"}
    )
    app = backend.app(
        register=lambda app: app.task(lambda ctx, p: None, name="exports.run", schedules=[hourly])
    )
    app.maintenance.run_pass()  # stores the schedule
    backend.clock.advance(timedelta(hours=1, seconds=30))
    app.maintenance.run_pass()  # its occurrence's run
    app.schedules.trigger_now("exports.hourly")  # an operator's extra run

    made = app.runs.list(tags={"kind": "hourly"}).runs
    assert len(made) >= 2  # occurrences and the extra run
    assert {r.id for r in made} == {r.id for r in app.runs.list(schedule="exports.hourly").runs}
    assert all(r.tags == {"customer": "42", "kind": "hourly"} for r in made)
    with pytest.raises(InvalidKeyError, match="tag 'kind'"):
        Schedule.every("bad", timedelta(hours=1), tags={"kind": "<b>"})


def test_a_transactions_runs_carry_their_tags(backend: Backend) -> None:
    app = backend.app(register=register)
    with app.transaction() as tx:
        run = tx.trigger("export", {}, tags={"customer": "42"})
    [listed] = app.runs.list(tags={"customer": "42"}).runs
    assert listed.id == run.id and listed.tags == {"customer": "42"}
    with pytest.raises(InvalidKeyError, match="tag 'customer'"), app.transaction() as tx:
        tx.trigger("export", {}, tags={"customer": "a\u2028b"})


def test_a_bulk_operation_by_tag_acts_on_that_tags_runs_only(backend: Backend) -> None:
    app = backend.app(register=register)
    failing = [
        app.trigger("export", {"fail": True}, tags={"customer": f"c{n % 3}"}) for n in range(12)
    ]
    waiting = [
        app.trigger("export", {}, delay=3600, tags={"customer": f"c{n % 3}"}) for n in range(6)
    ]
    drain(app)
    c1 = BulkFilter(tags=(("customer", "c1"),))

    assert app.bulk.count("retry", c1).selected == 4
    retried = app.bulk.start("retry", c1, actor="ops", reason="customer 1 replay")
    done = app.bulk.run(retried.id)
    cancelled = app.bulk.run(app.bulk.start("cancel", c1, actor="ops").id)

    assert done.tally.acted == 4
    assert cancelled.tally.acted == 2 + 4  # the waiting runs, and the retries: they keep tags
    for run in failing:
        links = [e for e in app.runs.events(run.id) if e.type is EventType.LINKED_RUN]
        assert bool(links) == (run.tags["customer"] == "c1")
    for run in waiting:
        expected = RunStatus.CANCELLED if run.tags["customer"] == "c1" else RunStatus.QUEUED
        assert app.runs.get(run.id).status is expected
    with pytest.raises(InvalidKeyError, match="tag 'customer'"):
        app.bulk.count("retry", BulkFilter(tags=(("customer", "\x00"),)))
    assert BulkFilter.from_json(c1.to_json()) == c1


def test_every_run_of_a_chain_carries_its_tags(backend: Backend) -> None:
    app = backend.app(register=register)
    app.task(lambda ctx, payload: {"step": 2}, name="first")
    chain = app.chain(("first", {}), "export", tags={"order": "7"})
    drain(app)
    drain(app)

    runs = app.runs.list(tags={"order": "7"}).runs
    assert sorted(r.task for r in runs) == ["export", "first"]
    assert all(r.status is RunStatus.SUCCEEDED for r in runs)
    assert [r.id for r in app.runs.children(chain.id).runs] == [
        r.id for r in runs if r.task == "first"
    ]
