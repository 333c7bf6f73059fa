"""Listing runs reads them with BatchGetItem. DynamoDB may leave keys unprocessed when it
throttles: they are asked for again after a growing wait, and keys still left after the
last attempt are an error the caller can retry, never a silently shorter page."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest

from runlane_sqs import StorageUnavailable
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.runs import run_to_wire
from runlane_sqs.adapters.dynamodb.store import (
    BATCH_GET_ATTEMPTS,
    BATCH_GET_FIRST_WAIT_SECONDS,
    DynamoRunStore,
)
from runlane_sqs.core import machine
from runlane_sqs.core.machine import RepublishPolicy
from runlane_sqs.testing import ManualClock

TABLE = "runlane"
ENV = "test"


class ThrottlingClient:
    """Answers BatchGetItem from ``items``, leaving the keys ``unprocessed`` says
    unprocessed on each call in turn."""

    def __init__(self, items: dict[str, dict[str, Any]], unprocessed: list[int]) -> None:
        self.items = items
        self.unprocessed = deque(unprocessed)
        self.requested: list[int] = []

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        wanted = request["RequestItems"][TABLE]["Keys"]
        self.requested.append(len(wanted))
        left = self.unprocessed.popleft() if self.unprocessed else 0
        served, kept = wanted[: len(wanted) - left], wanted[len(wanted) - left :]
        response: dict[str, Any] = {
            "Responses": {TABLE: [self.items[key["pk"]["S"]] for key in served]}
        }
        if kept:
            response["UnprocessedKeys"] = {TABLE: {"Keys": kept}}
        return response


def stored_runs(count: int) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    clock = ManualClock()
    run_keys: list[dict[str, Any]] = []
    items: dict[str, dict[str, Any]] = {}
    for n in range(count):
        run, event = machine.new_run(
            run_id=f"{n:032x}",
            environment=ENV,
            task="t",
            queue="default",
            payload={"n": n},
            now=clock.now(),
            republish=RepublishPolicy(),
        )
        key = keys.run_key(ENV, run.id)
        run_keys.append(key)
        items[key["pk"]["S"]] = run_to_wire(run, [event], json.dumps({"n": n}))
    return run_keys, items


def store_over(client: ThrottlingClient, waits: list[float]) -> DynamoRunStore:
    store = DynamoRunStore(client, TABLE, ENV)
    store.sleep = waits.append  # type: ignore[method-assign]
    return store


def test_unprocessed_keys_are_read_again_after_a_growing_wait() -> None:
    run_keys, items = stored_runs(5)
    client = ThrottlingClient(items, unprocessed=[3, 2])
    waits: list[float] = []

    runs = store_over(client, waits)._batch_get(run_keys)

    assert [run.payload for run in runs] == [{"n": n} for n in range(5)]
    assert client.requested == [5, 3, 2]
    assert waits == [BATCH_GET_FIRST_WAIT_SECONDS, BATCH_GET_FIRST_WAIT_SECONDS * 2]


def test_keys_still_unprocessed_after_the_last_attempt_raise_instead_of_shrinking() -> None:
    run_keys, items = stored_runs(4)
    client = ThrottlingClient(items, unprocessed=[1] * BATCH_GET_ATTEMPTS)
    waits: list[float] = []

    with pytest.raises(StorageUnavailable, match="left 1 of 4 runs unread"):
        store_over(client, waits)._batch_get(run_keys)
    assert len(client.requested) == BATCH_GET_ATTEMPTS
    assert len(waits) == BATCH_GET_ATTEMPTS - 1


def test_no_keys_send_no_request() -> None:
    client = ThrottlingClient({}, unprocessed=[])
    assert store_over(client, [])._batch_get([]) == []
    assert client.requested == []
