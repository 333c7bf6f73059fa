"""A maintenance pass is never stopped by its own saved state.

A saved cursor that is damaged or forged (the wrong attributes, plain values where
DynamoDB values belong, another partition's position, not base64 JSON, JSON nested
1,000 deep), or that the store refuses for good (DynamoDB's ``ValidationException``), is
logged as a warning, deleted, and its partition scanned from the start: the pass still
publishes every due run, once. A transient failure (throttling) keeps the cursor, and
the next pass resumes from it.
"""

from __future__ import annotations

import base64
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from runlane_sqs import Runlane, StorageError, StorageUnavailable
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, shard_count
from runlane_sqs.core.indexes import AGENDA_SHARDS, SCANNED_KINDS, AgendaKind
from runlane_sqs.engine.maintenance import MaintenanceConfig
from tests.apps.recovery_tasks import register_recovery
from tests.backends import Backend
from tests.behaviour.maintenance_support import (
    published,
    run_ids_by_shard,
    store_due_run,
    take_wakeups,
)

DISCARDED = "discarding the saved cursor of"


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register_recovery)


def due_in_every_shard(app: Runlane, per_shard: int) -> list[str]:
    """``per_shard`` runs due now, with no wakeup published, in each agenda shard."""
    return [store_due_run(app, run_id).id for run_id in run_ids_by_shard(per_shard)]


def every_partition(app: Runlane) -> list[str]:
    environment = app.config.environment
    return [p for kind in SCANNED_KINDS for p in agenda_partitions(environment, kind.value)]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def other_partition(partition: str) -> str:
    environment, kind, shard = partition.split("#")
    if shard_count(kind) == 1:  # a kind of one partition: another kind's
        return f"{environment}#{AgendaKind.RUN.value}#{shard}"
    return f"{environment}#{kind}#{(int(shard) + 1) % shard_count(kind)}"


FORGED: dict[str, Callable[[str], str]] = {
    "the wrong attributes": lambda p: b64(json.dumps({"at": 0, "id": "0" * 32}).encode()),
    "plain values": lambda p: b64(
        json.dumps({"pk": "RUN#x", "sk": "RUN", "agenda_pk": p, "agenda_at": 0}).encode()
    ),
    "another partition's position": lambda p: b64(
        json.dumps(
            {
                "pk": {"S": "RUN#x"},
                "sk": {"S": "RUN"},
                "agenda_pk": {"S": other_partition(p)},
                "agenda_at": {"N": "0"},
            }
        ).encode()
    ),
    "not base64 JSON": lambda p: "%%% not a cursor %%%",
    "base64 of garbage": lambda p: b64(b"\xff\xfe garbage"),
    "JSON nested 1,000 deep": lambda p: b64(b"[" * 1000 + b"]" * 1000),
}


def save_directly(backend: Backend, app: Runlane, partition: str, cursor: str) -> None:
    """Write a saved cursor as the table (or the in-memory store) holds it."""
    if not backend.real:
        app.store.progress.save_cursor(partition, cursor)
        return
    dynamodb = backend.request.getfixturevalue("dynamodb")
    dynamodb.put_item(
        TableName=app.config.table,
        Item={
            "pk": {"S": keys.maintenance_pk(app.config.environment)},
            "sk": {"S": keys.cursor_sk(partition)},
            "cursor": {"S": cursor},
        },
    )


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_saved_cursor_is_discarded_and_the_pass_publishes_every_due_run(
    case: str, app: Runlane, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    run_ids = due_in_every_shard(app, per_shard=2)
    for partition in every_partition(app):
        save_directly(backend, app, partition, FORGED[case](partition))
    caplog.set_level(logging.WARNING, logger="runlane_sqs.maintenance")

    report = app.maintenance.run_pass()

    assert published(report) == len(run_ids)
    assert take_wakeups(app) == Counter({run_id: 1 for run_id in run_ids})
    assert report.cursors == {}
    assert app.store.progress.load_cursors() == {}
    warned = [r for r in caplog.records if DISCARDED in r.getMessage()]
    assert {r.levelno for r in warned} == {logging.WARNING}
    assert sorted(getattr(r, "partition", None) for r in warned) == sorted(every_partition(app))


def refuse_resumed_queries(
    backend: Backend, app: Runlane, monkeypatch: pytest.MonkeyPatch, code: str
) -> list[int]:
    """From now on every agenda query that resumes from a cursor fails as DynamoDB fails
    with ``code``; returns the count of refusals (the in-memory store raises what the
    DynamoDB store raises for it)."""
    refused: list[int] = []
    if backend.real:
        client = app.client("dynamodb")
        real_query = client.query

        def query(**request: Any) -> Any:
            if request.get("IndexName") == "agenda" and "ExclusiveStartKey" in request:
                refused.append(1)
                error = {"Error": {"Code": code, "Message": "The provided starting key is invalid"}}
                raise ClientError(error, "Query")
            return real_query(**request)

        monkeypatch.setattr(client, "query", query)
        return refused
    real_page = app.store.agenda_page
    failure = StorageUnavailable if code == "ThrottlingException" else StorageError

    def agenda_page(partition: str, until: Any, limit: int, cursor: str | None) -> Any:
        if cursor is not None:
            refused.append(1)
            raise failure(f"DynamoDB request failed: {code}")
        return real_page(partition, until, limit, cursor)

    monkeypatch.setattr(app.store, "agenda_page", agenda_page)
    return refused


def a_pass_that_saves_due_cursors(app: Runlane) -> tuple[list[str], Counter[str]]:
    """Two due runs in each shard and a pass with room for one per shard: it publishes
    one run of each and saves a cursor for each due partition."""
    run_ids = due_in_every_shard(app, per_shard=2)
    app.maintenance.bounds = MaintenanceConfig(limit_per_job=AGENDA_SHARDS)
    report = app.maintenance.run_pass()
    due = set(agenda_partitions(app.config.environment, AgendaKind.RUN.value))
    assert set(report.cursors) == due
    assert set(app.store.progress.load_cursors()) == due
    app.maintenance.bounds = MaintenanceConfig()
    return run_ids, take_wakeups(app)


def test_a_saved_cursor_refused_for_good_is_discarded_and_the_scan_starts_over(
    app: Runlane,
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run_ids, first = a_pass_that_saves_due_cursors(app)
    refused = refuse_resumed_queries(backend, app, monkeypatch, "ValidationException")
    caplog.set_level(logging.WARNING, logger="runlane_sqs.maintenance")

    report = app.maintenance.run_pass()

    assert len(refused) == AGENDA_SHARDS
    assert published(report) == len(run_ids) - sum(first.values())
    assert first + take_wakeups(app) == Counter({run_id: 1 for run_id in run_ids})
    assert app.store.progress.load_cursors() == {}
    assert caplog.text.count(DISCARDED) == AGENDA_SHARDS


def test_a_transient_failure_keeps_the_saved_cursor_for_the_next_pass(
    app: Runlane, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ids, first = a_pass_that_saves_due_cursors(app)
    saved = app.store.progress.load_cursors()
    with monkeypatch.context() as patched:
        refuse_resumed_queries(backend, app, patched, "ThrottlingException")
        with pytest.raises(StorageUnavailable):
            app.maintenance.run_pass()
    assert app.store.progress.load_cursors() == saved

    report = app.maintenance.run_pass()

    assert published(report) == len(run_ids) - sum(first.values())
    assert first + take_wakeups(app) == Counter({run_id: 1 for run_id in run_ids})
    assert app.store.progress.load_cursors() == {}
