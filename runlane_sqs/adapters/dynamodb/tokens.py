"""The token item: the one item (``TOKEN#{environment}#{token_id}`` / ``TOKEN``) that
holds a token's status, its value and metadata and its decision (docs/design/storage.md,
"Token item").

This module converts tokens to the item's wire format and back, and builds the requests
that create, read and decide a token item and take it off the agenda.

Times are stored as whole epoch milliseconds (converted as the run item's are, by
:mod:`runlane_sqs.adapters.dynamodb.runs`); the value and metadata as their stored text
(:mod:`runlane_sqs.core.values`: compact JSON, or the envelope of a sealed value). A
token is listed on the agenda while it has work left: a pending one at its timeout, a
decided one at its decision time until no waiter is left to resume.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import AttributeMap, TokenItem
from runlane_sqs.adapters.dynamodb.keys import agenda_pk
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.adapters.dynamodb.runs import from_ms, to_ms, to_ms_or_none
from runlane_sqs.core.clock import EPOCH, ONE_MS, to_epoch_ms
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.tokens import Token, TokenDecision, TokenStatus, token_agenda_entry
from runlane_sqs.core.values import decode_json, stored_text


def _at(ms: Any) -> datetime | None:
    return EPOCH + int(ms) * ONE_MS if ms is not None else None


def token_to_wire(token: Token) -> AttributeMap:
    entry = token_agenda_entry(token)
    item = TokenItem(
        pk=keys.token_pk(token.environment, token.id),
        sk=keys.TOKEN_SK,
        token_id=token.id,
        environment=token.environment,
        token_status=token.status.value,
        value=stored_text(token.value) if token.value is not None else None,
        metadata=stored_text(token.metadata) if token.metadata is not None else None,
        created_at=to_ms(token.created_at),
        timeout_at=to_ms_or_none(token.timeout_at),
        decided_at=to_ms_or_none(token.decided_at),
        decision_trace=token.decision_trace,
        agenda_pk=agenda_pk(token.environment, entry[0], token.id) if entry else None,
        agenda_at=to_ms(entry[1]) if entry else None,
    )
    wire: AttributeMap = item.serialize()
    return wire


def token_from_wire(wire: AttributeMap) -> Token:
    item: TokenItem = TokenItem.from_raw_data(wire)
    return Token(
        id=item.token_id,
        environment=item.environment,
        status=TokenStatus(item.token_status),
        created_at=from_ms(int(item.created_at)),
        timeout_at=_at(item.timeout_at),
        value=decode_json(item.value),
        metadata=decode_json(item.metadata),
        decided_at=_at(item.decided_at),
        resuming=item.agenda_pk is not None and item.token_status != TokenStatus.PENDING.value,
        decision_trace=item.decision_trace,
    )


def put_token(table: str, item: AttributeMap) -> Request:
    x = Expressions(TokenItem)
    x.require(x.absent("pk"))
    return x.request({"TableName": table, "Item": item})


def get_token(table: str, environment: str, token_id: str) -> Request:
    return {
        "TableName": table,
        "Key": keys.token_key(environment, token_id),
        "ConsistentRead": True,
    }


def decide_token(table: str, environment: str, decision: TokenDecision) -> Request:
    """Store a token's one decision without reading it first: only while it is still
    pending (first one wins). It stays on the agenda at its decision time until no
    waiter is left; returns the decided token."""
    decided_ms = to_epoch_ms(decision.decided_at)
    kind = AgendaKind.TOKEN.value
    x = Expressions(TokenItem)
    x.set("token_status", decision.status.value)
    x.set("decided_at", decided_ms)
    x.set("agenda_pk", agenda_pk(environment, kind, decision.token_id))
    x.set("agenda_at", decided_ms)
    if decision.value is not None:
        x.set("value", stored_text(decision.value))
    if decision.trace is not None:
        x.set("decision_trace", decision.trace)
    x.require(x.exists("pk"), x.compare("token_status", "=", "pending"))
    return x.request(
        {
            "TableName": table,
            "Key": keys.token_key(environment, decision.token_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def finish_token_resume(table: str, environment: str, token_id: str) -> Request:
    """Take a decided token off the agenda once no waiter is left to resume."""
    x = Expressions(TokenItem)
    x.remove("agenda_pk", "agenda_at")
    x.require(x.compare("token_status", "<>", "pending"))
    return x.request({"TableName": table, "Key": keys.token_key(environment, token_id)})
