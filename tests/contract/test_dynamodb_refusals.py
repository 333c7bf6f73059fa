"""How the DynamoDB store reports a request DynamoDB (or botocore's own parameter check)
refuses as malformed: a permanent ``StorageError``, never ``StorageUnavailable`` (which
tells callers to try the same request again). A ``Query`` refused that way only because
of where its cursor starts raises ``InvalidCursor``, so the caller knows to drop the
cursor (maintenance starts the partition over; the CLI exits 2). Throttling stays
``StorageUnavailable``, cursor or not. A conditional write refused on its condition is
answered from the refusal alone (the item that won), with no second request."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from runlane_sqs import StorageError, StorageUnavailable
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.dynamodb.tokens import token_to_wire
from runlane_sqs.core.model import WaitKind
from runlane_sqs.core.tokens import (
    Token,
    TokenAlreadyDecided,
    TokenDecision,
    TokenNotFound,
    TokenStatus,
)
from runlane_sqs.errors import InvalidCursor

TABLE = "runlane"
ENV = "test"
PARTITION = f"{ENV}#run#0"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def cursor_of(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


AGENDA_CURSOR = cursor_of(
    {
        "pk": {"S": f"RUN#{ENV}#0000"},
        "sk": {"S": "RUN"},
        "agenda_pk": {"S": PARTITION},
        "agenda_at": {"N": "1"},
    }
)
WAITS_CURSOR = cursor_of(
    {
        "pk": {"S": f"RUN#{ENV}#0000"},
        "sk": {"S": "RUN"},
        "wait_pk": {"S": f"{ENV}#signal#order-7"},
        "wait_sk": {"S": "0000"},
    }
)


class RefusingClient:
    """Raises ``error`` for every ``Query``; records the requests."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.queries: list[dict[str, Any]] = []

    def query(self, **request: Any) -> dict[str, Any]:
        self.queries.append(request)
        raise self.error


def client_error(code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "The provided starting key is invalid"}},
        "Query",
    )


# A listing cursor holds no key, only a creation-time bound the library checks itself
# (tests/core/test_cursor_checks.py), so DynamoDB never sees one to refuse.
READS: dict[str, tuple[Callable[[DynamoRunStore, str | None], object], str]] = {
    "agenda": (lambda s, c: s.agenda_page(PARTITION, NOW, 10, c), AGENDA_CURSOR),
    "token agenda": (lambda s, c: s.tokens.token_agenda_page(PARTITION, NOW, 10, c), AGENDA_CURSOR),
    "waiters": (lambda s, c: s.waiting_runs(WaitKind.SIGNAL, "order-7", 10, c), WAITS_CURSOR),
}


def read_page(read: str, store: DynamoRunStore, *, from_cursor: bool) -> object:
    """One page of ``read``, from a well-formed cursor or from the start."""
    page, cursor = READS[read]
    return page(store, cursor if from_cursor else None)


@pytest.mark.parametrize("read", list(READS))
def test_a_cursor_dynamodb_refuses_as_malformed_is_an_invalid_cursor(read: str) -> None:
    client = RefusingClient(client_error("ValidationException"))
    store = DynamoRunStore(client, TABLE, ENV)

    with pytest.raises(InvalidCursor, match="DynamoDB refused it") as refused:
        read_page(read, store, from_cursor=True)

    assert "is not valid" in str(refused.value)
    assert "ExclusiveStartKey" in client.queries[0]


@pytest.mark.parametrize("read", list(READS))
def test_a_malformed_query_without_a_cursor_is_a_permanent_storage_error(read: str) -> None:
    store = DynamoRunStore(RefusingClient(client_error("ValidationException")), TABLE, ENV)

    with pytest.raises(StorageError) as refused:
        read_page(read, store, from_cursor=False)

    assert not isinstance(refused.value, StorageUnavailable | InvalidCursor)


@pytest.mark.parametrize("read", list(READS))
def test_throttling_is_unavailable_with_or_without_a_cursor(read: str) -> None:
    for with_cursor in (True, False):
        store = DynamoRunStore(RefusingClient(client_error("ThrottlingException")), TABLE, ENV)
        with pytest.raises(StorageUnavailable):
            read_page(read, store, from_cursor=with_cursor)


def test_botocore_parameter_validation_is_permanent_not_unavailable() -> None:
    error = ParamValidationError(report="Invalid type for parameter ExclusiveStartKey.pk")
    store = DynamoRunStore(RefusingClient(error), TABLE, ENV)

    with pytest.raises(StorageError, match="malformed") as refused:
        store.agenda_page(PARTITION, NOW, 10, None)

    assert not isinstance(refused.value, StorageUnavailable)


def test_a_forged_cursor_never_reaches_dynamodb() -> None:
    client = RefusingClient(client_error("ValidationException"))
    store = DynamoRunStore(client, TABLE, ENV)

    with pytest.raises(InvalidCursor, match="another partition"):
        store.agenda_page(f"{ENV}#run#1", NOW, 10, AGENDA_CURSOR)

    assert client.queries == []


class RefusingWrites:
    """Raises ``error`` for every ``UpdateItem``; records the requests (and has no
    ``get_item``: a read after the refusal fails the test)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.updates: list[dict[str, Any]] = []

    def update_item(self, **request: Any) -> dict[str, Any]:
        self.updates.append(request)
        raise self.error


def condition_failed(item: dict[str, Any] | None) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": "ConditionalCheckFailedException", "Message": "refused"}
    }
    if item is not None:
        response["Item"] = item
    return ClientError(response, "UpdateItem")  # type: ignore[arg-type]


TOKEN_ID = "7" * 32
DECISION = TokenDecision.of(TOKEN_ID, TokenStatus.COMPLETED, {"approved": False}, NOW)


def test_a_refused_token_decision_raises_with_the_decision_that_won_from_one_request() -> None:
    won = Token(TOKEN_ID, ENV, TokenStatus.COMPLETED, NOW, value={"approved": True}, decided_at=NOW)
    client = RefusingWrites(condition_failed(token_to_wire(won)))

    with pytest.raises(TokenAlreadyDecided) as refused:
        DynamoRunStore(client, TABLE, ENV).tokens.decide_token(DECISION)

    assert refused.value.token.value == {"approved": True}
    assert len(client.updates) == 1


def test_a_refused_decision_of_a_token_that_is_not_there_is_not_found() -> None:
    client = RefusingWrites(condition_failed(None))

    with pytest.raises(TokenNotFound):
        DynamoRunStore(client, TABLE, ENV).tokens.decide_token(DECISION)

    assert len(client.updates) == 1


def test_a_throttled_conditional_write_is_unavailable_not_refused() -> None:
    store = DynamoRunStore(RefusingWrites(client_error("ThrottlingException")), TABLE, ENV)

    with pytest.raises(StorageUnavailable):
        store.tokens.decide_token(DECISION)
    with pytest.raises(StorageUnavailable):
        store.watch_run("0" * 32)  # refused would be None: no such run
