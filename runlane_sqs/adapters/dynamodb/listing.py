"""Listing runs from the status index: one query per status, merged newest first.

The opaque cursor holds each status partition's position, so a page never repeats or
skips a run even though it draws from several partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runlane_sqs.adapters.dynamodb import keys, requests
from runlane_sqs.adapters.dynamodb.cursors import (
    decode_object,
    encode_cursor,
    invalid_cursor,
    status_key,
)
from runlane_sqs.core.durations import from_epoch_ms, to_epoch_ms
from runlane_sqs.ports.store import RunQuery

SendQuery = Callable[[dict[str, Any]], Any]
"""Sends one ``Query`` request and returns the response."""
DONE = "done"


def _bounds(query: RunQuery) -> tuple[str | None, str | None]:
    after = None
    if query.created_after is not None:
        ms = to_epoch_ms(query.created_after)
        if from_epoch_ms(ms) < query.created_after:  # a bound inside a millisecond
            ms += 1
        after = f"{ms:013d}"
    # "~" sorts after "#": every id created in that millisecond is included
    before = f"{to_epoch_ms(query.created_before):013d}~" if query.created_before else None
    return after, before


def _position(item: dict[str, Any]) -> dict[str, Any]:
    """The index key of an item, as an ExclusiveStartKey."""
    return {name: item[name] for name in ("pk", "sk", "status_pk", "created_sk")}


def _positions(cursor: str | None, environment: str, query: RunQuery) -> dict[str, Any]:
    """Where the cursor left each status partition of ``query``: ``DONE`` or the key to
    start after. Raises :class:`~runlane_sqs.errors.InvalidCursor` for anything else."""
    positions = decode_object(cursor) or {}
    statuses = {status.value for status in query.statuses}
    for status, position in positions.items():
        if status not in statuses:
            raise invalid_cursor(cursor, f"it has a position for {status!r}, not asked for")
        if position == DONE:
            continue
        problem = status_key(keys.status_pk(environment, status)).problem(position)
        if problem is not None:
            raise invalid_cursor(cursor, problem)
    return positions


def list_run_keys(
    send_query: SendQuery,
    table: str,
    environment: str,
    query: RunQuery,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Keys of the next ``limit`` matching runs, newest first, and the next cursor."""
    positions = _positions(cursor, environment, query)
    after, before = _bounds(query)
    found: list[tuple[str, str, dict[str, Any]]] = []
    ends: dict[str, Any] = {}
    for status in query.statuses:
        start = positions.get(status.value)
        if start == DONE:
            continue
        request = requests.query_status(
            table,
            keys.status_pk(environment, status.value),
            after_sk=after,
            before_sk=before,
            task=query.task,
            queue=query.queue,
            limit=limit,
            start=start,
        )
        response = send_query(request)
        items = response.get("Items", [])
        ends[status.value] = response.get("LastEvaluatedKey")
        found.extend((item["created_sk"]["S"], status.value, item) for item in items)
        if not items:
            positions[status.value] = ends[status.value] or DONE
    found.sort(key=lambda entry: entry[0], reverse=True)
    # A status with more to read may hold unread runs just older than its last key (the
    # last item it read): only runs at or above every such key can be placed now. With a
    # filter, pages can be short; every call still moves at least one position forward.
    horizon = max((end["created_sk"]["S"] for end in ends.values() if end), default="")
    page = [entry for entry in found if entry[0] >= horizon][:limit]
    for status_value, end in ends.items():
        returned = [item for _, s, item in found if s == status_value]
        taken = [item for _, s, item in page if s == status_value]
        if not returned:
            continue
        if len(taken) == len(returned):
            positions[status_value] = end or DONE
        elif taken:
            positions[status_value] = _position(taken[-1])
    done = all(positions.get(s.value) == DONE for s in query.statuses)
    run_keys = [{"pk": item["pk"], "sk": item["sk"]} for _, _, item in page]
    return run_keys, None if done else encode_cursor(positions)
