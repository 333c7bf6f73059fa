"""Idempotency and singleton keys end to end on DynamoDB (semantics 16)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb import keys
from tests.integration.conftest import queue_counts, queue_url, scan_items

TASK = "keys.charge"
OTHER_TASK = "keys.refund"


def _handler(ctx: TaskContext, payload: Any) -> Any:
    if payload.get("fail"):
        raise RuntimeError("card declined")
    return payload


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    app = make_app()
    app.task(_handler, name=TASK)
    app.task(_handler, name=OTHER_TASK)
    app.provision()
    return app


def _key_owner(dynamodb: Any, app: Runlane, pk: str) -> str | None:
    item = dynamodb.get_item(
        TableName=app.config.table, Key=keys.key_item_key(pk), ConsistentRead=True
    ).get("Item")
    return item["run_id"]["S"] if item else None


def _run_items(dynamodb: Any, app: Runlane) -> list[dict[str, Any]]:
    return [i for i in scan_items(dynamodb, app.config.table) if i["pk"]["S"].startswith("RUN#")]


def test_a_duplicate_trigger_returns_the_existing_run(
    app: Runlane, sqs: Any, dynamodb: Any
) -> None:
    first = app.trigger(TASK, {"order": 1}, idempotency_key="order-1")
    again = app.trigger(TASK, {"order": 1, "retry": True}, idempotency_key="order-1")
    other_task = app.trigger(OTHER_TASK, {"order": 1}, idempotency_key="order-1")

    assert first.created and not again.created and other_task.created
    assert again.id == first.id
    assert again.payload == {"order": 1}
    assert other_task.id != first.id
    assert len(_run_items(dynamodb, app)) == 2
    assert queue_counts(sqs, queue_url(sqs, app))["visible"] == 2

    assert app.worker().drain() == 2
    after_success = app.trigger(TASK, {"order": 1}, idempotency_key="order-1")
    assert (after_success.id, after_success.created) == (first.id, False)
    assert after_success.status is RunStatus.SUCCEEDED
    assert len(_run_items(dynamodb, app)) == 2


def test_a_failed_run_releases_its_idempotency_key(app: Runlane, dynamodb: Any) -> None:
    pk = keys.idempotency_pk(app.config.environment, TASK, "order-2")
    failed = app.trigger(TASK, {"fail": True}, idempotency_key="order-2")
    assert _key_owner(dynamodb, app, pk) == failed.id

    assert app.worker().drain() == 1
    assert app.runs.get(failed.id).status is RunStatus.FAILED
    assert _key_owner(dynamodb, app, pk) is None

    retried = app.trigger(TASK, {"fail": False}, idempotency_key="order-2")
    assert retried.created and retried.id != failed.id
    assert _key_owner(dynamodb, app, pk) == retried.id
    assert app.worker().drain() == 1
    assert app.runs.get(retried.id).status is RunStatus.SUCCEEDED
    assert app.trigger(TASK, None, idempotency_key="order-2").id == retried.id


def test_a_singleton_key_allows_one_active_run(app: Runlane, dynamodb: Any) -> None:
    active = app.trigger(TASK, {"n": 1}, singleton_key="nightly")
    duplicate = app.trigger(TASK, {"n": 2}, singleton_key="nightly")
    assert (duplicate.id, duplicate.created) == (active.id, False)
    assert duplicate.status is RunStatus.QUEUED

    assert app.worker().drain() == 1
    assert app.runs.get(active.id).status is RunStatus.SUCCEEDED

    next_one = app.trigger(TASK, {"n": 3}, singleton_key="nightly")
    assert next_one.created and next_one.id != active.id
    pk = keys.singleton_pk(app.config.environment, TASK, "nightly")
    assert _key_owner(dynamodb, app, pk) == next_one.id
    assert len(_run_items(dynamodb, app)) == 2


def test_a_singleton_held_by_a_finished_run_whose_key_was_not_released_is_taken_over(
    app: Runlane, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker can die between writing the outcome and releasing the key; the next
    trigger sees the owner finished and takes the key over."""
    first = app.trigger(TASK, {"n": 1}, singleton_key="report")
    monkeypatch.setattr(app.engine.finisher, "release_keys", lambda run: None)  # worker "dies"
    assert app.worker().drain() == 1
    pk = keys.singleton_pk(app.config.environment, TASK, "report")
    assert _key_owner(dynamodb, app, pk) == first.id

    second = app.trigger(TASK, {"n": 2}, singleton_key="report")

    assert second.created and second.id != first.id
    assert _key_owner(dynamodb, app, pk) == second.id
