"""A cursor handed back (by an operator, or saved by an earlier maintenance pass) is
checked before it reaches DynamoDB: it must decode to exactly the key that query's pages
end on (its attribute names, each a DynamoDB string or number) in the partition being
read. Anything else, however deeply nested or oddly typed, is refused with
``InvalidCursor`` and never surfaces as a ``KeyError``, ``TypeError``,
``RecursionError`` or a botocore error."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from runlane_sqs import RunStatus
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import (
    agenda_key,
    decode_cursor,
    encode_cursor,
    status_key,
    waits_key,
)
from runlane_sqs.adapters.dynamodb.listing import list_run_keys
from runlane_sqs.errors import InvalidCursor
from runlane_sqs.ports.store import RunQuery

ENV = "prod"
PARTITION = f"{ENV}#due#1"
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


def status_position(status: str, environment: str = ENV) -> dict[str, Any]:
    return {
        "pk": {"S": f"RUN#{environment}#0123"},
        "sk": {"S": "RUN"},
        "status_pk": {"S": keys.status_pk(environment, status)},
        "created_sk": {"S": keys.created_sk(1893499200000, "0123")},
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
    position = status_position("queued")
    shape = status_key(keys.status_pk(ENV, "queued"))
    assert decode_cursor(encode_cursor(position), shape) == position


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
    "another shard's partition": {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#due#2"}},
    "another kind's partition": {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#lease#1"}},
    "another environment's partition": {**AGENDA_KEY, "agenda_pk": {"S": "staging#due#1"}},
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
    other = {**AGENDA_KEY, "agenda_pk": {"S": f"{ENV}#due#2"}}
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


# --- listing: one position per status --------------------------------------------------


class Queries:
    """Records the ``Query`` requests a listing sends and answers each with no items."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(request)
        return {"Items": []}


QUEUED_ONLY = RunQuery(statuses=(RunStatus.QUEUED,))
FORGED_LISTINGS: dict[str, object] = {
    "a status not asked for": {"failed": "done"},
    "a status that does not exist": {"nonsense": "done"},
    "another status's partition": {"queued": status_position("failed")},
    "another environment's partition": {"queued": status_position("queued", "staging")},
    "an agenda key": {"queued": AGENDA_KEY},
    "a word other than done": {"queued": "finished"},
    "a null position": {"queued": None},
    "a list": [{"queued": "done"}],
}


@pytest.mark.parametrize("case", list(FORGED_LISTINGS))
def test_a_forged_listing_cursor_is_refused_before_any_query(case: str) -> None:
    queries = Queries()
    with pytest.raises(InvalidCursor, match="is not valid: "):
        list_run_keys(queries, "runlane", ENV, QUEUED_ONLY, 10, forged(FORGED_LISTINGS[case]))
    assert queries.sent == []


def test_a_listing_cursor_resumes_each_status_where_it_stopped() -> None:
    queries = Queries()
    position = status_position("queued")
    cursor = forged({"queued": position, "failed": "done"})
    query = RunQuery(statuses=(RunStatus.QUEUED, RunStatus.FAILED))

    assert list_run_keys(queries, "runlane", ENV, query, 10, cursor) == ([], None)

    assert [request["ExclusiveStartKey"] for request in queries.sent] == [position]
