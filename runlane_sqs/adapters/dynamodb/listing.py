"""Listing runs from the status index (or the tag indexes): one query per partition,
merged newest first.

The status index holds each run under its status group (``active``, ``parked`` or a
terminal status) and its shard (docs/design/storage.md, "Indexes"), so a listing reads
every shard of every group its statuses live in. Entries sort by ``created_sk``
(creation time, then run id), which is unique, so the opaque cursor holds one
position: the ``created_sk`` the next page starts below. Every page queries each
partition below that position, so a page never repeats or skips a run. The cursor also
names its environment and which partitions are read to their end (a bit each, in the
order of :func:`~runlane_sqs.core.indexes.status_partitions`), which later
pages do not query again.

A listing by tag (:func:`list_tagged_keys`) is merged the same way from the tag
indexes' partitions of its first tag (every index the tag may be on, every shard); its
cursor names the tag too (``by``), so a cursor of another listing is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runlane_sqs.adapters.dynamodb import runs
from runlane_sqs.adapters.dynamodb.cursors import (
    QueryAll,
    decode_object,
    encode_cursor,
    invalid_cursor,
)
from runlane_sqs.adapters.dynamodb.keys import status_partitions, tag_partitions
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.ports.store import RunQuery

POSITION = re.compile(r"\d{13}#[0-9a-f]{32}")
"""A ``created_sk``: where a listing cursor continues below."""
DONE_BITS = re.compile(r"[0-9a-f]{1,64}")
"""The bits of the partitions read to their end, as hex."""


def _bounds(query: RunQuery) -> tuple[str | None, str | None]:
    """The creation window as ``created_sk`` bounds: at or after, strictly before."""
    after = None
    if query.created_after is not None:
        ms = to_epoch_ms(query.created_after)
        if from_epoch_ms(ms) < query.created_after:  # a bound inside a millisecond
            ms += 1
        after = f"{ms:013d}"
    # "~" sorts after "#": every id created in that millisecond is included
    before = f"{to_epoch_ms(query.created_before):013d}~" if query.created_before else None
    return after, before


def _start(
    cursor: str | None, environment: str, partitions: int, tag: str | None = None
) -> tuple[str | None, int]:
    """The ``created_sk`` a cursor says to continue below and the bits of the partitions
    it read to their end; raises :class:`~runlane_sqs.errors.InvalidCursor` for a cursor
    this listing did not make (a listing by tag names its tag, ``by``)."""
    position = decode_object(cursor)
    if position is None:
        return None, 0
    below, done, scope = position.get("below"), position.get("done"), position.get("in")
    fields = {"below", "done", "in"} if tag is None else {"below", "done", "in", "by"}
    if set(position) != fields or not isinstance(below, str):
        raise invalid_cursor(cursor, "it is not a listing position")
    if tag is not None and position["by"] != tag:
        raise invalid_cursor(cursor, "it was made by a listing of another tag")
    if scope != environment:
        raise invalid_cursor(cursor, "it was made in another environment")
    if not POSITION.fullmatch(below):
        raise invalid_cursor(cursor, "its position is not a creation time and run id")
    if not isinstance(done, str) or not DONE_BITS.fullmatch(done) or int(done, 16) >> partitions:
        raise invalid_cursor(cursor, "its finished partitions are not this listing's")
    return below, int(done, 16)


@dataclass
class _Read:
    """What one page's queries found."""

    found: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    horizon: str = ""
    """The newest position some partition was not read below (``""``: none)."""
    exhausted: dict[int, str] = field(default_factory=dict)
    """Partitions read to their end, by bit: the oldest position each returned."""


PartitionQuery = Callable[[int, str | None, str | None], dict[str, Any]]
"""The ``Query`` of one partition (by its bit), created at or after the first bound and
strictly below the second."""


def _read(
    send_queries: QueryAll,
    partitions: int,
    done: int,
    query_of: PartitionQuery,
    bounds: tuple[str | None, str | None],
) -> _Read:
    after, before = bounds
    read = _Read()
    bits = [bit for bit in range(partitions) if not done >> bit & 1]
    sent = [query_of(bit, after, before) for bit in bits]
    for bit, page in zip(bits, send_queries(sent), strict=True):
        oldest = "~"
        for item in page.items:
            position = item["created_sk"]["S"]
            if before is None or position < before:  # BETWEEN includes its upper bound
                read.found.append((position, item))
                oldest = min(oldest, position)
        end = page.last_key
        if end:
            # this partition is read down to ``end`` only: older runs may follow
            read.horizon = max(read.horizon, end["created_sk"]["S"])
        else:
            read.exhausted[bit] = oldest
    return read


def list_run_keys(
    send_queries: QueryAll,
    table: str,
    environment: str,
    query: RunQuery,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Keys of the next ``limit`` runs of the query's status groups (the caller keeps
    the runs of the asked statuses), newest first, and the next cursor."""
    partitions = status_partitions(environment, query.statuses)

    def query_of(bit: int, after: str | None, below: str | None) -> dict[str, Any]:
        return runs.query_status(
            table,
            partitions[bit],
            after_sk=after,
            below_sk=below,
            task=query.task,
            queue=query.queue,
            limit=limit,
        )

    return _merged(send_queries, environment, len(partitions), query_of, query, limit, cursor)


def list_tagged_keys(
    send_queries: QueryAll,
    table: str,
    environment: str,
    query: RunQuery,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Keys of the next ``limit`` runs carrying every tag of the query, newest first, and
    the next cursor: the tag indexes are read for the query's first tag (every index and
    shard it may be in) and filtered on the others, which they carry; the caller keeps
    the runs of the asked statuses and schedule."""
    (key, value), *others = query.tags
    partitions = tag_partitions(environment, key, value)

    def query_of(bit: int, after: str | None, below: str | None) -> dict[str, Any]:
        slot, partition = partitions[bit]
        return runs.query_tagged(
            table,
            slot,
            partition,
            after_sk=after,
            below_sk=below,
            task=query.task,
            queue=query.queue,
            tags=others,
            limit=limit,
        )

    tag = f"{key}={value}"
    return _merged(send_queries, environment, len(partitions), query_of, query, limit, cursor, tag)


def _merged(
    send_queries: QueryAll,
    environment: str,
    partitions: int,
    query_of: PartitionQuery,
    query: RunQuery,
    limit: int,
    cursor: str | None,
    tag: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The next page of run keys merged from every partition, newest first, and the next
    cursor."""
    below, done = _start(cursor, environment, partitions, tag)
    after, before = _bounds(query)
    if below is not None and (before is None or below < before):
        before = below
    read = _read(send_queries, partitions, done, query_of, (after, before))
    read.found.sort(key=lambda entry: entry[0], reverse=True)
    # Every partition is read at least down to the horizon, so every run at or above it
    # was seen; a full page continues below its last run, a short one below the horizon.
    placed = [entry for entry in read.found if entry[0] >= read.horizon]
    page = placed[:limit]
    run_keys = [{"pk": item["pk"], "sk": item["sk"]} for _, item in page]
    if len(page) == limit and (read.horizon or len(placed) > limit):
        next_below = page[-1][0]
    elif read.horizon:
        next_below = read.horizon
    else:
        return run_keys, None
    for bit, oldest in read.exhausted.items():
        if oldest >= next_below:  # nothing of it is left below the next position
            done |= 1 << bit
    position = {"below": next_below, "done": f"{done:x}", "in": environment}
    if tag is not None:
        position["by"] = tag
    return run_keys, encode_cursor(position)
