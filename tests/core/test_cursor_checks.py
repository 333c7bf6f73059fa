"""A cursor handed back (by an operator, or saved by an earlier maintenance pass) is
checked before it reaches DynamoDB: it must decode to exactly the key that query's pages
end on (its attribute names, each a DynamoDB string or number) in the partition being
read. Anything else, however deeply nested or oddly typed, is refused with
``InvalidCursor`` and never surfaces as a ``KeyError``, ``TypeError``,
``RecursionError`` or a botocore error."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from runlane_sqs import RunStatus
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import (
    QueryPage,
    agenda_key,
    decode_cursor,
    encode_cursor,
    page_of,
    waits_key,
)
from runlane_sqs.adapters.dynamodb.listing import list_run_keys
from runlane_sqs.core.indexes import FINISHED_SHARDS, SHARDS
from runlane_sqs.errors import InvalidCursor
from runlane_sqs.ports.store import RunQuery

ENV = "prod"
PARTITION = f"{ENV}#run#1"
AGENDA_KEY = {
    "pk": {"S": f"RUN#{ENV}#0123"},
    "sk": {"S": "RUN"},
    "agenda_pk": {"S": PARTITION},
    "agenda_at": {"N": "1893499200000"},
}
WAITS_PARTITION = f"{ENV}#signal#order-7"
WAITS_KEY = {
    "pk": {"S": f"RUN#{ENV}#0123"},
    "sk": {"S": "RUN"},
    "wait_pk": {"S": WAITS_PARTITION},
    "wait_sk": {"S": "0123"},
}


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def forged(value: object) -> str:
    """A cursor made the way the library makes them, from any JSON value."""
    return b64(json.dumps(value).encode())


# --- what the library produces comes back ----------------------------------------------


def test_a_cursor_decodes_to_the_key_it_was_made_from() -> None:
    assert decode_cursor(encode_cursor(AGENDA_KEY), agenda_key(PARTITION)) == AGENDA_KEY
    assert decode_cursor(encode_cursor(WAITS_KEY), waits_key(WAITS_PARTITION)) == WAITS_KEY


@pytest.mark.parametrize("number", ["0", "-12", "1.5", "1e3", "2.5E-3"])
def test_any_dynamodb_number_is_a_number(number: str) -> None:
    position = {**AGENDA_KEY, "agenda_at": {"N": number}}
    assert decode_cursor(forged(position), agenda_key(PARTITION)) == position


@pytest.mark.parametrize("cursor", [None, ""])
def test_no_cursor_starts_from_the_beginning(cursor: str | None) -> None:
    assert decode_cursor(cursor, agenda_key(PARTITION)) is None


# --- forged structures -----------------------------------------------------------------

FORGED: dict[str, object] = {
    "an attribute renamed": {
        **{k: v for k, v in AGENDA_KEY.items() if k != "sk"},
        "at": {"S": "x"},
    },
    "an attribute missing": {k: v for k, v in AGENDA_KEY.items() if k != "agenda_at"},
    "an attribute too many": {**AGENDA_KEY, "status": {"S": "queued"}},
    "no attributes": {},
    "a plain string value": {**AGENDA_KEY, "pk": "RUN#prod#0123"},
    "a plain number value": {**AGENDA_KEY, "agenda_at": 1893499200000},
    "a null value": {**AGENDA_KEY, "sk": None},
    "a list value": {**AGENDA_KEY, "sk": ["RUN"]},
    "a number typed as a string": {**AGENDA_KEY, "agenda_at": {"S": "1893499200000"}},
    "a string typed as a number": {**AGENDA_KEY, "pk": {"N": "1"}},
    "a number that is not one": {**AGENDA_KEY, "agenda_at": {"N": "soon"}},
    "a JSON number inside the type": {**AGENDA_KEY, "agenda_at": {"N": 1893499200000}},
    "a map inside the type": {**AGENDA_KEY, "sk": {"S": {"S": "RUN"}}},
    "two types at once": {**AGENDA_KEY, "pk": {"S": "RUN#prod#0123", "N": "1"}},
    "an unknown type": {**AGENDA_KEY, "sk": {"B": "UlVO"}},
    "another shard's partition": {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#run#2"}},
    "another kind's partition": {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#token#1"}},
    "another environment's partition": {**AGENDA_KEY, "agenda_pk": {"S": "staging#run#1"}},
    "a key of another index": WAITS_KEY,
    "a list": [AGENDA_KEY],
    "a string": "RUN#prod#0123",
    "a number": 17,
    "true": True,
    "null": None,
}


@pytest.mark.parametrize("case", list(FORGED))
def test_a_forged_agenda_cursor_is_refused(case: str) -> None:
    with pytest.raises(InvalidCursor, match="is not valid: "):
        decode_cursor(forged(FORGED[case]), agenda_key(PARTITION))


def test_a_cursor_of_another_partition_says_so() -> None:
    other = {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#run#2"}}
    with pytest.raises(InvalidCursor, match=f"another partition than '{PARTITION}'"):
        decode_cursor(forged(other), agenda_key(PARTITION))


def test_a_waits_cursor_is_for_its_own_target_only() -> None:
    cursor = forged(WAITS_KEY)
    with pytest.raises(InvalidCursor, match="another partition"):
        decode_cursor(cursor, waits_key(f"{ENV}#signal#order-8"))
    with pytest.raises(InvalidCursor):
        decode_cursor(forged(AGENDA_KEY), waits_key(WAITS_PARTITION))


# --- what is not a cursor at all -------------------------------------------------------

GARBAGE: dict[str, object] = {
    "not base64": "%%% not a cursor %%%",
    "base64 of bytes that are not text": b64(b"\xff\xfe\x00garbage\x80"),
    "base64 of text that is not JSON": b64(b"hello, world"),
    "base64 of half a JSON object": b64(b'{"pk": {"S": '),
    "JSON nested 1,000 deep": b64(b"[" * 1000 + b"]" * 1000),
    "objects nested 1,000 deep": b64(b'{"a":' * 1000 + b"1" + b"}" * 1000),
    "JSON nested 100,000 deep": b64(b"[" * 100_000 + b"]" * 100_000),
    "a lone surrogate": "\ud800",
    "not a string": 12345,
    "a list of strings": ["eyJwayI6MX0"],
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_what_is_not_a_cursor_is_refused(case: str) -> None:
    with pytest.raises(InvalidCursor, match="is not valid: "):
        decode_cursor(GARBAGE[case], agenda_key(PARTITION))


def test_the_error_quotes_only_the_start_of_a_long_cursor() -> None:
    cursor = b64(b"[" * 1000 + b"]" * 1000)
    with pytest.raises(InvalidCursor) as refused:
        decode_cursor(cursor, agenda_key(PARTITION))
    assert cursor[:40] in str(refused.value)
    assert cursor[:41] not in str(refused.value)


# --- listing: one position below which every partition continues ---------------------


class Queries:
    """Records the ``Query`` requests a listing sends and answers each from ``pages``
    (one response per partition, in order; no items once they run out)."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.sent: list[dict[str, Any]] = []
        self.pages = list(pages)

    def __call__(self, sent: list[dict[str, Any]]) -> list[QueryPage]:
        self.sent.extend(sent)
        return [page_of(self.pages.pop(0) if self.pages else {"Items": []}) for _ in sent]


POSITION = keys.created_sk(1893499200000, "0123456789abcdef0123456789abcdef")
QUEUED_ONLY = RunQuery(statuses=(RunStatus.QUEUED,))
LISTING = {"below": POSITION, "done": "0", "in": ENV}
FORGED_LISTINGS: dict[str, object] = {
    "another word than below": {"after": POSITION, "done": "0", "in": ENV},
    "a key too many": {**LISTING, "status": "queued"},
    "a key missing": {"below": POSITION, "in": ENV},
    "another environment": {**LISTING, "in": "staging"},
    "a position that is not a string": {**LISTING, "below": 1893499200000},
    "a null position": {**LISTING, "below": None},
    "a time without a run id": {**LISTING, "below": "1893499200000"},
    "a run id that is not hex": {**LISTING, "below": "1893499200000#" + "z" * 32},
    "an agenda key": {**LISTING, "below": AGENDA_KEY},
    "a markup position": {**LISTING, "below": "<script>alert(1)</script>"},
    "finished partitions that are not hex": {**LISTING, "done": "zz"},
    "a finished partition the listing does not have": {**LISTING, "done": f"{1 << SHARDS:x}"},
    "finished partitions as a number": {**LISTING, "done": 1},
    "a list": [LISTING],
}


@pytest.mark.parametrize("case", list(FORGED_LISTINGS))
def test_a_forged_listing_cursor_is_refused_before_any_query(case: str) -> None:
    queries = Queries()
    with pytest.raises(InvalidCursor, match="is not valid: "):
        list_run_keys(queries, "runlane", ENV, QUEUED_ONLY, 10, forged(FORGED_LISTINGS[case]))
    assert queries.sent == []


def test_a_listing_reads_every_shard_of_each_status_group_once() -> None:
    queries = Queries()
    query = RunQuery(statuses=(RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.FAILED))

    assert list_run_keys(queries, "runlane", ENV, query, 10, None) == ([], None)

    partitions = [key_value(request, "status_pk", "=") for request in queries.sent]
    assert partitions == [f"{ENV}#active#{s}" for s in range(SHARDS)] + [
        f"{ENV}#failed#{s}" for s in range(FINISHED_SHARDS)
    ]


def test_a_listing_cursor_continues_every_partition_below_its_position() -> None:
    queries = Queries()

    done = f"{0b101:x}"  # shards 0 and 2 were read to their end
    cursor = forged({**LISTING, "done": done})

    assert list_run_keys(queries, "runlane", ENV, QUEUED_ONLY, 10, cursor) == ([], None)

    partitions = [key_value(request, "status_pk", "=") for request in queries.sent]
    assert partitions == [f"{ENV}#active#{s}" for s in range(SHARDS) if s not in (0, 2)]
    assert {key_value(request, "created_sk", "<") for request in queries.sent} == {POSITION}


def key_value(request: dict[str, Any], attribute: str, operator: str) -> str:
    """The text a query's key condition compares ``attribute`` to with ``operator``."""
    names = request["ExpressionAttributeNames"]
    for name, placeholder in re.findall(
        rf"(#\w+) {re.escape(operator)} (:\w+)", request["KeyConditionExpression"]
    ):
        if names[name] == attribute:
            return str(request["ExpressionAttributeValues"][placeholder]["S"])
    raise AssertionError(f"no {attribute} {operator} in {request['KeyConditionExpression']!r}")


def entry(created_ms: int, run_id: str) -> dict[str, Any]:
    return {
        "pk": {"S": f"RUN#{ENV}#{run_id}"},
        "sk": {"S": "RUN"},
        "created_sk": {"S": keys.created_sk(created_ms, run_id)},
    }


def test_a_short_partition_page_holds_back_older_runs_of_other_partitions() -> None:
    # shard 0 stopped early (a filter, or its Limit) at 500: runs older than that in any
    # partition wait for the next page, which continues below 500
    first = entry(900, "a" * 32)
    stopped = entry(500, "b" * 32)
    older = entry(100, "c" * 32)
    queries = Queries({"Items": [first], "LastEvaluatedKey": stopped}, {"Items": [older]})

    run_keys, cursor = list_run_keys(queries, "runlane", ENV, QUEUED_ONLY, 10, None)

    assert [key["pk"]["S"] for key in run_keys] == [first["pk"]["S"]]
    assert cursor is not None
    position = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    # every partition but shard 0 was read to its end, shard 1 only down to 100
    assert position["below"] == stopped["created_sk"]["S"]
    assert int(position["done"], 16) == (1 << SHARDS) - 1 - 0b11
