"""The in-memory DynamoDB (``runlane_sqs.testing.InMemoryDynamoDB``) held to DynamoDB:
each test sends the same raw requests to the fake and to the emulator over HTTP (the
moto server, or DynamoDB Local with ``RUNLANE_TEST_BACKEND=aws-local``) and expects the
same answers, covering every expression form and refusal the DynamoDB adapter relies
on. Where moto and DynamoDB Local disagree, the fake follows DynamoDB Local (AWS's own
implementation) and the test says so."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from runlane_sqs import StorageUnavailable
from runlane_sqs.adapters.dynamodb.items import (
    AGENDA_INDEX,
    STATUS_INDEX,
    WAITS_INDEX,
    table_definition,
)
from runlane_sqs.testing import InMemoryDynamoDB, InMemoryRunStore, in_memory_app
from tests.emulators import TEST_BACKEND

FAKE = "fake"
EMULATOR = "emulator"


@pytest.fixture(params=[FAKE, pytest.param(EMULATOR, marks=pytest.mark.integration)])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == FAKE:
        yield InMemoryDynamoDB()
        return
    yield request.getfixturevalue("dynamodb")


@pytest.fixture
def moto(client: Any) -> bool:
    """Whether ``client`` is the moto server (where it differs from DynamoDB Local)."""
    return not isinstance(client, InMemoryDynamoDB) and TEST_BACKEND == "moto"


@pytest.fixture
def table(client: Any) -> str:
    """The project's own table (its indexes as ``table_definition`` declares them)."""
    name = f"fake-{uuid.uuid4().hex[:8]}"
    client.create_table(**table_definition(name))
    return name


def key(pk: str, sk: str = "S") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def refused(call: Any, **request: Any) -> dict[str, Any]:
    """The error response of a request that must be refused."""
    with pytest.raises(ClientError) as caught:
        call(**request)
    response: dict[str, Any] = caught.value.response
    return response


def code(response: dict[str, Any]) -> str:
    return str(response["Error"]["Code"])


def stored(client: Any, table: str, pk: str, sk: str = "S") -> dict[str, Any] | None:
    item: dict[str, Any] | None = client.get_item(
        TableName=table, Key=key(pk, sk), ConsistentRead=True
    ).get("Item")
    return item


# --- conditional writes -------------------------------------------------------------


def test_a_refused_put_returns_the_item_it_found_when_asked(client: Any, table: str) -> None:
    item = {**key("a"), "n": {"N": "1"}}
    guard = {"ConditionExpression": "attribute_not_exists(pk)"}
    client.put_item(TableName=table, Item=item, **guard)
    again = {"TableName": table, "Item": {**key("a"), "n": {"N": "2"}}, **guard}
    response = refused(client.put_item, **again, ReturnValuesOnConditionCheckFailure="ALL_OLD")
    assert code(response) == "ConditionalCheckFailedException"
    assert response["Item"] == item
    assert "Item" not in refused(client.put_item, **again)
    assert stored(client, table, "a") == item


def test_a_refused_update_of_a_missing_item_returns_no_item(client: Any, table: str) -> None:
    """The condition is checked before the update reads anything: ``list_append`` of a
    missing list is not what refuses it."""
    response = refused(
        client.update_item,
        TableName=table,
        Key=key("missing"),
        UpdateExpression="SET #h = list_append(#h, :e)",
        ConditionExpression="#s = :s",
        ExpressionAttributeNames={"#h": "history", "#s": "seq"},
        ExpressionAttributeValues={":e": {"L": [{"S": "x"}]}, ":s": {"N": "1"}},
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    assert code(response) == "ConditionalCheckFailedException"
    assert "Item" not in response
    assert stored(client, table, "missing") is None


def test_a_refused_delete_returns_the_item_and_keeps_it(client: Any, table: str) -> None:
    item = {**key("a"), "seq": {"N": "3"}}
    client.put_item(TableName=table, Item=item)
    response = refused(
        client.delete_item,
        TableName=table,
        Key=key("a"),
        ConditionExpression="seq = :s",
        ExpressionAttributeValues={":s": {"N": "2"}},
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    assert (code(response), response["Item"]) == ("ConditionalCheckFailedException", item)
    deleted = client.delete_item(
        TableName=table,
        Key=key("a"),
        ConditionExpression="seq = :s",
        ExpressionAttributeValues={":s": {"N": "3"}},
        ReturnValues="ALL_OLD",
    )
    assert deleted["Attributes"] == item
    assert stored(client, table, "a") is None


ITEM = {
    **key("c"),
    "n": {"N": "5"},
    "s": {"S": "abc"},
    "e": {"S": "é"},
    "tags": {"SS": ["x", "y"]},
    "list": {"L": [{"S": "p"}, {"N": "2"}]},
    "map": {"M": {"k": {"S": "v"}}},
}
VALUES = {
    ":n5": {"N": "5"},
    ":n4": {"N": "4"},
    ":n6": {"N": "6"},
    ":s": {"S": "abc"},
    ":ab": {"S": "ab"},
    ":b": {"S": "b"},
    ":x": {"S": "x"},
    ":p": {"S": "p"},
    ":type": {"S": "SS"},
    ":three": {"N": "3"},
    ":one": {"N": "1"},
    ":v": {"S": "v"},
}
CONDITIONS = [
    ("n = :n5", True),
    ("n <> :n5", False),
    ("n < :n6 AND n > :n4", True),
    ("n <= :n5 AND n >= :n5", True),
    ("n < :n4 OR s = :s", True),
    ("NOT n = :n5", False),
    ("NOT (n = :n4 OR n = :n6)", True),
    ("n BETWEEN :n4 AND :n6", True),
    ("n BETWEEN :n6 AND :n6", False),
    ("n IN (:n4, :n5)", True),
    ("n IN (:n4, :n6)", False),
    ("s > :ab AND s < :b", True),
    ("s = :n5", False),  # another type: not equal
    ("s < :n6", False),  # another type: no order
    ("zz <> :n5", True),  # a missing attribute is unequal to anything
    ("zz = :n5", False),
    ("zz < :n5", False),
    ("begins_with(s, :ab)", True),
    ("begins_with(s, :b)", False),
    ("contains(s, :b)", True),
    ("contains(tags, :x)", True),
    ("contains(tags, :b)", False),
    ("contains(#l, :p)", True),
    ("size(s) = :three", True),
    ("size(e) = :one", True),  # characters, not bytes
    ("size(tags) < :three AND size(#l) > :one", True),
    ("attribute_type(tags, :type)", True),
    ("attribute_exists(#m.k) AND attribute_not_exists(#m.j)", True),
    ("#m.k = :v AND #l[0] = :p", True),
    ("attribute_not_exists(zz) AND (attribute_exists(n))", True),
]


MOTO_FAILS = {"s < :n6": "answers HTTP 500 where DynamoDB Local finds no order: false"}


@pytest.mark.parametrize(("condition", "holds"), CONDITIONS)
def test_conditions(client: Any, table: str, moto: bool, condition: str, holds: bool) -> None:
    if moto and condition in MOTO_FAILS:
        pytest.skip(f"moto {MOTO_FAILS[condition]}; the fake follows DynamoDB Local")
    client.put_item(TableName=table, Item=ITEM)
    names = {n: v for n, v in (("#l", "list"), ("#m", "map")) if n in condition}
    values = {n: VALUES[n] for n in re.findall(r":\w+", condition)}
    request: dict[str, Any] = {
        "TableName": table,
        "Key": key("c"),
        "UpdateExpression": "SET seen = :seen",
        "ConditionExpression": condition,
        "ExpressionAttributeValues": {**values, ":seen": {"N": "1"}},
    }
    if names:
        request["ExpressionAttributeNames"] = names
    if holds:
        client.update_item(**request)
        assert (stored(client, table, "c") or {})["seen"] == {"N": "1"}
    else:
        assert code(refused(client.update_item, **request)) == "ConditionalCheckFailedException"


# --- updates ------------------------------------------------------------------------


def update(client: Any, table: str, expression: str, **request: Any) -> dict[str, Any]:
    response: dict[str, Any] = client.update_item(
        TableName=table,
        Key=key("u"),
        UpdateExpression=expression,
        ReturnValues="ALL_NEW",
        **request,
    )
    return response["Attributes"]


def test_update_actions(client: Any, table: str) -> None:
    client.put_item(
        TableName=table,
        Item={
            **key("u"),
            "n": {"N": "5"},
            "gone": {"S": "x"},
            "tags": {"SS": ["a", "b"]},
            "more": {"SS": ["a", "z"]},
        },
    )
    item = update(
        client,
        table,
        "SET n = n + :two, m = :m, h = list_append(if_not_exists(h, :empty), :one), "
        "f = if_not_exists(f, :two), d = n - :two REMOVE gone ADD c :two, tags :c DELETE more :a",
        ExpressionAttributeValues={
            ":two": {"N": "2"},
            ":m": {"M": {"lanes": {"M": {}}}},
            ":empty": {"L": []},
            ":one": {"L": [{"S": "e1"}]},
            ":c": {"SS": ["c"]},
            ":a": {"SS": ["a"]},
        },
    )
    assert item["n"] == {"N": "7"}  # every operand is read before any action applies
    assert item["d"] == {"N": "3"}
    assert item["h"] == {"L": [{"S": "e1"}]}
    assert (item["f"], item["c"]) == ({"N": "2"}, {"N": "2"})
    assert (sorted(item["tags"]["SS"]), item["more"]) == (["a", "b", "c"], {"SS": ["z"]})
    assert "gone" not in item
    item = update(
        client,
        table,
        "SET #m.#lanes.#one = :p, h = list_append(h, :more), f = if_not_exists(f, :p) ADD c :p",
        ExpressionAttributeNames={"#m": "m", "#lanes": "lanes", "#one": "1"},
        ExpressionAttributeValues={":p": {"N": "9"}, ":more": {"L": [{"S": "e2"}]}},
    )
    assert item["m"] == {"M": {"lanes": {"M": {"1": {"N": "9"}}}}}
    assert item["h"] == {"L": [{"S": "e1"}, {"S": "e2"}]}
    assert (item["f"], item["c"]) == ({"N": "2"}, {"N": "11"})
    item = update(
        client,
        table,
        "REMOVE #m.#lanes.#one DELETE tags :all",
        ExpressionAttributeNames={"#m": "m", "#lanes": "lanes", "#one": "1"},
        ExpressionAttributeValues={":all": {"SS": ["a", "b", "c"]}},
    )
    assert item["m"] == {"M": {"lanes": {"M": {}}}}
    assert "tags" not in item  # a set left empty is removed


def test_an_update_of_a_missing_item_creates_it(client: Any, table: str) -> None:
    item = update(
        client,
        table,
        "ADD n :one SET s = :s",
        ExpressionAttributeValues={":one": {"N": "1"}, ":s": {"S": "x"}},
    )
    assert item == {**key("u"), "n": {"N": "1"}, "s": {"S": "x"}}


def test_updated_values_returned(client: Any, table: str, moto: bool) -> None:
    client.put_item(TableName=table, Item={**key("u"), "n": {"N": "5"}, "s": {"S": "x"}})
    request = {
        "TableName": table,
        "Key": key("u"),
        "UpdateExpression": "SET n = n + :one, q = :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }
    new = client.update_item(**request, ReturnValues="UPDATED_NEW")["Attributes"]
    assert new == {"n": {"N": "6"}, "q": {"N": "1"}}
    old = client.update_item(**request, ReturnValues="UPDATED_OLD")["Attributes"]
    # DynamoDB Local returns every attribute the update names; moto leaves out those
    # whose value did not change (q). The fake follows DynamoDB Local.
    assert old == ({"n": {"N": "6"}} if moto else {"n": {"N": "6"}, "q": {"N": "1"}})
    assert "Attributes" not in client.update_item(**request)


# --- refusals of the request itself -------------------------------------------------

INVALID = [
    ("unused name", {"UpdateExpression": "SET a = :v", "ExpressionAttributeNames": {"#u": "u"}}),
    (
        "unused value",
        {"UpdateExpression": "SET a = :v", "ExpressionAttributeValues": {":w": {"S": "w"}}},
    ),
    ("undefined value", {"UpdateExpression": "SET a = :w", "ExpressionAttributeValues": {}}),
    ("undefined name", {"UpdateExpression": "SET #a = :v"}),
    ("overlapping paths", {"UpdateExpression": "SET a = :v, a = :v"}),
    ("a key attribute", {"UpdateExpression": "SET sk = :v"}),
    ("a missing operand", {"UpdateExpression": "SET a = missing"}),
    (
        "arithmetic on text",
        {"UpdateExpression": "SET a = s + :n", "ExpressionAttributeValues": {":n": {"N": "1"}}},
    ),
    ("a missing parent", {"UpdateExpression": "SET nothing.inner = :v"}),
    (
        "an empty set",
        {"UpdateExpression": "SET a = :e", "ExpressionAttributeValues": {":e": {"SS": []}}},
    ),
    (
        "bounds the wrong way",
        {
            "UpdateExpression": "SET a = :v",
            "ConditionExpression": "s BETWEEN :z AND :v",
            "ExpressionAttributeValues": {":v": {"S": "a"}, ":z": {"S": "z"}},
        },
    ),
    ("a syntax error", {"UpdateExpression": "SET a = = :v"}),
    (
        "an item over 400 KB",
        {
            "UpdateExpression": "SET a = :big",
            "ExpressionAttributeValues": {":big": {"S": "x" * 409_600}},
        },
    ),
]


MOTO_ACCEPTS = {
    "undefined name": "answers HTTP 500",
    "an empty set": "stores it",
    "bounds the wrong way": "refuses the condition instead",
}
"""Requests DynamoDB Local refuses as invalid and moto does not; the fake follows
DynamoDB Local."""


@pytest.mark.parametrize(("what", "request_"), INVALID, ids=[what for what, _ in INVALID])
def test_refused_updates(
    client: Any, table: str, moto: bool, what: str, request_: dict[str, Any]
) -> None:
    if moto and what in MOTO_ACCEPTS:
        pytest.skip(f"moto {MOTO_ACCEPTS[what]}; the fake follows DynamoDB Local")
    client.put_item(TableName=table, Item={**key("u"), "s": {"S": "m"}})
    request = {"ExpressionAttributeValues": {":v": {"S": "v"}}, **request_}
    if not request["ExpressionAttributeValues"]:
        del request["ExpressionAttributeValues"]
    response = refused(client.update_item, TableName=table, Key=key("u"), **request)
    assert code(response) == "ValidationException", what
    assert stored(client, table, "u") == {**key("u"), "s": {"S": "m"}}


def test_refused_keys_and_items(client: Any, table: str, moto: bool) -> None:
    wrong_keys = [{"pk": {"S": "a"}}, {**key("a"), "x": {"S": "y"}}]
    wrong_items = [{"pk": {"S": "a"}}, {**key("a"), "big": {"S": "x" * 409_600}}]
    if not moto:  # moto takes a key, and an index key, of the wrong type
        wrong_keys.append({"pk": {"N": "1"}, "sk": {"S": "a"}})
        wrong_items.append({**key("a"), "agenda_pk": {"N": "1"}})
    for wrong in wrong_keys:
        assert code(refused(client.get_item, TableName=table, Key=wrong)) == "ValidationException"
    for item in wrong_items:
        assert code(refused(client.put_item, TableName=table, Item=item)) == "ValidationException"
    missing = refused(client.get_item, TableName="no-such-table", Key=key("a"))
    assert code(missing) == "ResourceNotFoundException"


# --- transactions -------------------------------------------------------------------


def test_a_cancelled_transaction_gives_a_reason_per_action_and_writes_nothing(
    client: Any, table: str
) -> None:
    client.put_item(TableName=table, Item={**key("held"), "run_id": {"S": "r1"}})
    actions = [
        {"Put": {"TableName": table, "Item": {**key("new"), "n": {"N": "1"}}}},
        {
            "Put": {
                "TableName": table,
                "Item": {**key("held"), "run_id": {"S": "r2"}},
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "ConditionCheck": {
                "TableName": table,
                "Key": key("absent"),
                "ConditionExpression": "attribute_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {"Delete": {"TableName": table, "Key": key("other")}},
    ]
    response = refused(client.transact_write_items, TransactItems=actions)
    assert code(response) == "TransactionCanceledException"
    reasons = response["CancellationReasons"]
    assert [r["Code"] for r in reasons] == [
        "None",
        "ConditionalCheckFailed",
        "ConditionalCheckFailed",
        "None",
    ]
    assert reasons[1]["Item"] == {**key("held"), "run_id": {"S": "r1"}}
    assert "Item" not in reasons[2]  # nothing there to return
    assert stored(client, table, "new") is None


def test_a_transaction_writes_every_action(client: Any, table: str) -> None:
    client.put_item(TableName=table, Item={**key("a"), "n": {"N": "1"}})
    client.put_item(TableName=table, Item=key("gone"))
    client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": table,
                    "Key": key("a"),
                    "UpdateExpression": "ADD n :one",
                    "ConditionExpression": "n = :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            {"Put": {"TableName": table, "Item": key("b")}},
            {"Delete": {"TableName": table, "Key": key("gone")}},
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": key("b2"),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
    )
    assert (stored(client, table, "a") or {})["n"] == {"N": "2"}
    assert stored(client, table, "b") == key("b")
    assert stored(client, table, "gone") is None


def test_refused_transactions(client: Any, table: str) -> None:
    twice = [
        {"Put": {"TableName": table, "Item": key("a")}},
        {"Delete": {"TableName": table, "Key": key("a")}},
    ]
    assert code(refused(client.transact_write_items, TransactItems=twice)) == "ValidationException"
    many = [{"Put": {"TableName": table, "Item": key(str(n))}} for n in range(101)]
    assert code(refused(client.transact_write_items, TransactItems=many)) == "ValidationException"
    assert stored(client, table, "0") is None


def test_a_transaction_over_4_mb_is_refused(client: Any, table: str, moto: bool) -> None:
    if moto:
        pytest.skip("moto takes it; the fake follows DynamoDB Local")
    big = [
        {"Put": {"TableName": table, "Item": {**key(str(n)), "b": {"S": "x" * 390_000}}}}
        for n in range(11)
    ]
    assert code(refused(client.transact_write_items, TransactItems=big)) == "ValidationException"
    client.transact_write_items(TransactItems=big[:10])


# --- queries ------------------------------------------------------------------------


def agenda_item(n: int, partition: str = "p") -> dict[str, Any]:
    return {
        **key(f"run-{n:02}", "RUN"),
        "agenda_pk": {"S": partition},
        "agenda_at": {"N": str(100 + n % 5)},
        "environment": {"S": "test"},
        "payload": {"S": "not projected"},
    }


def query_agenda(client: Any, table: str, **request: Any) -> dict[str, Any]:
    response: dict[str, Any] = client.query(
        TableName=table,
        IndexName=AGENDA_INDEX,
        KeyConditionExpression="#pk = :pk AND #at <= :until",
        ExpressionAttributeNames={"#pk": "agenda_pk", "#at": "agenda_at"},
        ExpressionAttributeValues={":pk": {"S": "p"}, ":until": {"N": "103"}},
        **request,
    )
    return response


def test_an_index_query_pages_in_index_order(client: Any, table: str, moto: bool) -> None:
    for n in range(12):
        client.put_item(TableName=table, Item=agenda_item(n))
    client.put_item(TableName=table, Item=agenda_item(20, "other"))
    client.put_item(TableName=table, Item={**key("unlisted", "RUN")})  # sparse: not in the index
    seen, start, pages = [], None, 0
    while True:
        page = query_agenda(
            client, table, Limit=3, **({"ExclusiveStartKey": start} if start else {})
        )
        pages += 1
        seen += [(int(i["agenda_at"]["N"]), i["pk"]["S"]) for i in page["Items"]]
        assert all("payload" not in i and i["environment"] == {"S": "test"} for i in page["Items"])
        start = page.get("LastEvaluatedKey")
        if start is None:
            break
        assert set(start) == {"pk", "sk", "agenda_pk", "agenda_at"}
    expected = sorted((100 + n % 5, f"run-{n:02}") for n in range(12) if 100 + n % 5 <= 103)
    assert sorted(seen) == expected
    assert [at for at, _ in seen] == sorted(at for at, _ in seen)
    # 10 items, 3 a page: DynamoDB Local returns a LastEvaluatedKey whenever a page is
    # full, so a fourth page (empty) ends it only when the last page was full; moto
    # returns one only when an item is left. The fake follows DynamoDB Local.
    assert pages == 4
    backwards = query_agenda(client, table, ScanIndexForward=False)["Items"]
    assert [int(i["agenda_at"]["N"]) for i in backwards] == sorted(
        (at for at, _ in expected), reverse=True
    )


def test_a_full_last_page_has_a_last_evaluated_key(client: Any, table: str, moto: bool) -> None:
    for n in range(3):
        client.put_item(TableName=table, Item=agenda_item(n))
    page = query_agenda(client, table, Limit=3)
    # DynamoDB Local (and DynamoDB) stop at the limit and say where; moto says so only
    # when another item is left. The fake follows DynamoDB Local.
    assert ("LastEvaluatedKey" in page) is not moto
    if not moto:
        rest = query_agenda(client, table, Limit=3, ExclusiveStartKey=page["LastEvaluatedKey"])
        assert (rest["Items"], "LastEvaluatedKey" in rest) == ([], False)


def test_limit_counts_items_before_the_filter(client: Any, table: str) -> None:
    for n in range(6):
        client.put_item(
            TableName=table,
            Item={
                **agenda_item(n),
                "created_sk": {"S": f"c{n}"},
                "status_pk": {"S": "st"},
                "task": {"S": "t" if n % 2 else "u"},
                "run_id": {"S": str(n)},
                "queue": {"S": "q"},
                "created_at": {"N": "1"},
            },
        )
    request = {
        "TableName": table,
        "IndexName": STATUS_INDEX,
        "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :a AND :b",
        "FilterExpression": "#task = :task",
        "ExpressionAttributeNames": {"#pk": "status_pk", "#sk": "created_sk", "#task": "task"},
        "ExpressionAttributeValues": {
            ":pk": {"S": "st"},
            ":a": {"S": "c1"},
            ":b": {"S": "c4"},
            ":task": {"S": "t"},
        },
        "ScanIndexForward": False,
        "Limit": 3,
    }
    page = client.query(**request)
    assert [i["created_sk"]["S"] for i in page["Items"]] == ["c3"]
    assert (page["Count"], page["ScannedCount"]) == (1, 3)
    assert page["LastEvaluatedKey"]["created_sk"] == {"S": "c2"}
    rest = client.query(**request, ExclusiveStartKey=page["LastEvaluatedKey"])
    assert [i["created_sk"]["S"] for i in rest["Items"]] == ["c1"]
    assert set(rest["Items"][0]) == {
        "pk",
        "sk",
        "status_pk",
        "created_sk",
        "run_id",
        "task",
        "queue",
        "created_at",
    }
    counted = client.query(**{**request, "Select": "COUNT"})
    assert "Items" not in counted and counted["Count"] == 1


def test_keys_only_index_and_table_queries(client: Any, table: str) -> None:
    for n in range(3):
        client.put_item(
            TableName=table,
            Item={
                **key(f"r{n}", "RUN"),
                "wait_pk": {"S": "w"},
                "wait_sk": {"S": f"r{n}"},
                "other": {"S": "x"},
            },
        )
    waiters = client.query(
        TableName=table,
        IndexName=WAITS_INDEX,
        KeyConditionExpression="#pk = :pk",
        ExpressionAttributeNames={"#pk": "wait_pk"},
        ExpressionAttributeValues={":pk": {"S": "w"}},
    )["Items"]
    assert [set(i) for i in waiters] == [{"pk", "sk", "wait_pk", "wait_sk"}] * 3
    for sk in ("CURSOR#a", "CURSOR#b", "DRAINED#q"):
        client.put_item(TableName=table, Item=key("m", sk))
    cursors = client.query(
        TableName=table,
        KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)",
        ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
        ExpressionAttributeValues={":pk": {"S": "m"}, ":prefix": {"S": "CURSOR#"}},
        ConsistentRead=True,
    )["Items"]
    assert [i["sk"]["S"] for i in cursors] == ["CURSOR#a", "CURSOR#b"]
    refused_read = refused(
        client.query,
        TableName=table,
        IndexName=WAITS_INDEX,
        KeyConditionExpression="#pk = :pk",
        ExpressionAttributeNames={"#pk": "wait_pk"},
        ExpressionAttributeValues={":pk": {"S": "w"}},
        ConsistentRead=True,
    )
    assert code(refused_read) == "ValidationException"


def test_projections_and_batch_get(client: Any, table: str) -> None:
    client.put_item(
        TableName=table,
        Item={
            **key("a"),
            "tat": {"N": "1"},
            "other": {"S": "x"},
            "m": {"M": {"k": {"S": "v"}, "j": {"S": "w"}}},
        },
    )
    client.put_item(TableName=table, Item={**key("b"), "tat": {"N": "2"}})
    got = client.get_item(
        TableName=table,
        Key=key("a"),
        ProjectionExpression="tat, #m.k",
        ExpressionAttributeNames={"#m": "m"},
    )
    assert got["Item"] == {"tat": {"N": "1"}, "m": {"M": {"k": {"S": "v"}}}}
    found = client.batch_get_item(
        RequestItems={table: {"Keys": [key("a"), key("missing"), key("b")], "ConsistentRead": True}}
    )
    assert sorted(i["pk"]["S"] for i in found["Responses"][table]) == ["a", "b"]
    assert not found.get("UnprocessedKeys")
    twice = refused(client.batch_get_item, RequestItems={table: {"Keys": [key("a"), key("a")]}})
    assert code(twice) == "ValidationException"
    many = refused(
        client.batch_get_item, RequestItems={table: {"Keys": [key(str(n)) for n in range(101)]}}
    )
    assert code(many) == "ValidationException"


# --- faults, as a test injects them at the fake's methods --------------------------


def test_a_throttled_request_reaches_the_store_as_dynamodbs_would() -> None:
    """A test that wants DynamoDB to fail raises DynamoDB's error from the fake's method:
    the store translates it as it translates AWS's."""
    app = in_memory_app()
    app.task(name="t")(lambda ctx, payload: payload)
    assert isinstance(app.store, InMemoryRunStore)

    def throttled(**request: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
        raise ClientError(error, "GetItem")  # type: ignore[arg-type]

    app.store.dynamodb.get_item = throttled  # type: ignore[method-assign]
    with pytest.raises(StorageUnavailable, match="ThrottlingException"):
        app.store.get_run("some-run")
