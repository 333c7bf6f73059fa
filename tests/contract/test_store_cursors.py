"""Both run stores refuse the same cursors: a paged read (the agenda, token agenda,
waiters and run listing) handed a cursor it did not produce for that query, whether
forged, damaged, or taken from another partition or environment, raises
``InvalidCursor`` before it reads anything. A difference here would let users' unit
tests (on the in-memory store) accept cursors production refuses."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import ManualClock, Runlane, RunStatus
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions
from runlane_sqs.core import machine
from runlane_sqs.core.indexes import AGENDA_SHARDS
from runlane_sqs.core.model import Run, WaitKind
from runlane_sqs.errors import InvalidCursor
from runlane_sqs.ports.store import RunQuery, RunStore
from runlane_sqs.testing import in_memory_app

TASK = "contract.cursors"
OTHER_ENVIRONMENT = "elsewhere"


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.integration)])
def make(request: pytest.FixtureRequest) -> Callable[..., Runlane]:
    """Builds apps on one store kind, all at the same manual time."""
    clock = ManualClock()

    def build(**options: Any) -> Runlane:
        if request.param == "memory":
            return in_memory_app(clock=clock, **options)
        app: Runlane = request.getfixturevalue("make_app")(clock=clock, **options)
        app.provision()
        return app

    return build


def store_runs_in_shard(app: Runlane, shard: int, count: int) -> None:
    """``count`` queued runs listed on the due agenda in ``shard``."""
    made = 0
    n = 0
    while made < count:
        run_id = f"{n:04x}" + "0" * 28
        n += 1
        if int(run_id[:4], 16) % AGENDA_SHARDS != shard:
            continue
        run, event = machine.new_run(
            run_id=run_id,
            environment=app.config.environment,
            task=TASK,
            queue="default",
            payload=None,
            now=app.clock.now(),
        )
        app.store.create_run(run, event, "null")
        made += 1


def forged(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


FORGED = {
    "the wrong attributes": forged({"at": 0, "id": "0" * 32}),
    "plain values": forged({"pk": "RUN#x", "sk": "RUN", "agenda_pk": "dev#run#0"}),
    "a list": forged([{"pk": {"S": "RUN#x"}}]),
    "nested 1,000 deep": base64.urlsafe_b64encode(b"[" * 1000 + b"]" * 1000).decode(),
    "not base64 JSON": "%%% not a cursor %%%",
    "not a string": 42,
}
PAGED_READS: dict[str, Callable[[RunStore, Any], object]] = {
    "agenda": lambda store, cursor: store.agenda_page(
        agenda_partitions(store.environment, "run")[0], far_future(), 10, cursor
    ),
    "token agenda": lambda store, cursor: store.tokens.token_agenda_page(
        agenda_partitions(store.environment, "token")[0], far_future(), 10, cursor
    ),
    "waiters": lambda store, cursor: store.waiting_runs(WaitKind.SIGNAL, "order-7", 10, cursor),
    "listing": lambda store, cursor: store.list_runs(RunQuery(), 10, cursor),
}


def far_future() -> Any:
    return ManualClock().now() + timedelta(days=365)


@pytest.mark.parametrize("read", list(PAGED_READS))
@pytest.mark.parametrize("case", list(FORGED))
def test_every_paged_read_refuses_a_forged_cursor(
    make: Callable[..., Runlane], read: str, case: str
) -> None:
    app = make()
    with pytest.raises(InvalidCursor, match="is not valid: "):
        PAGED_READS[read](app.store, FORGED[case])


def remaining(
    page: Callable[[str | None], tuple[list[Run], str | None]], cursor: str | None
) -> list[Run]:
    """Every run from ``cursor`` on. DynamoDB may return a cursor with the page that
    holds the last item (moto does not), so read until no cursor comes back."""
    runs: list[Run] = []
    for _ in range(10):
        if cursor is None:
            return runs
        more, cursor = page(cursor)
        runs += more
    raise AssertionError("the pages did not end")


def test_an_agenda_cursor_is_refused_in_another_partition(make: Callable[..., Runlane]) -> None:
    app = make()
    store_runs_in_shard(app, shard=0, count=2)
    first, second = agenda_partitions(app.config.environment, "run")[:2]
    until = app.clock.now() + timedelta(days=1)
    page, cursor = app.store.agenda_page(first, until, 1, None)
    assert len(page) == 1 and cursor is not None

    with pytest.raises(InvalidCursor, match="another partition"):
        app.store.agenda_page(second, until, 1, cursor)
    rest = remaining(lambda at: app.store.agenda_page(first, until, 1, at), cursor)
    assert len({run.id for run in page + rest}) == 2


def test_a_listing_cursor_is_refused_in_another_environment(make: Callable[..., Runlane]) -> None:
    app = make()
    store_runs_in_shard(app, shard=0, count=2)
    query = RunQuery(statuses=(RunStatus.QUEUED,))
    page, cursor = app.store.list_runs(query, 1, None)
    assert len(page) == 1 and cursor is not None
    other = make(environment=OTHER_ENVIRONMENT)

    with pytest.raises(InvalidCursor):
        other.store.list_runs(query, 1, cursor)
    rest = remaining(lambda at: app.store.list_runs(query, 1, at), cursor)
    assert len({run.id for run in page + rest}) == 2
