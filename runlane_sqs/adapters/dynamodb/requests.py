"""Every DynamoDB request the run store sends, one named builder per operation.

Builders return the keyword arguments of the low-level client call, so the sync
(boto3) and async (aioboto3) adapters send exactly the same requests. Conditions and
updates are written with PynamoDB's expression language over :mod:`.items`.

Timeline of a plain run (three writes, no transaction, no read):

    trigger   PutItem     if the run item does not exist
    claim     UpdateItem  if seq, attempt, task = the wakeup's hint, runnable, due  (-> running)
    outcome   UpdateItem  if seq = seen seq and lease_token = own (-> succeeded/retrying/failed)

The claim on a wakeup's hint is :func:`claim_hinted`; a wakeup without a hint (or whose
hint no longer holds) is claimed after a read, with ``UpdateItem if seq = seen seq``.

Heartbeats are ``UpdateItem if lease_token = own and status is leased`` and append
no event. Triggers with idempotency or singleton keys write the key items and the
run in one ``TransactWriteItems``.
"""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import UnicodeAttribute
from pynamodb.expressions.condition import Condition, size
from pynamodb.expressions.update import Action, Update

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import (
    HISTORY_ATTRIBUTE,
    INDEX_ATTRIBUTES,
    AttributeMap,
    event_to_wire,
    map_additions,
    run_state_attributes,
)
from runlane_sqs.adapters.dynamodb.items import (
    AGENDA_INDEX,
    STATUS_INDEX,
    WAITS_INDEX,
    KeyItem,
    RunItem,
    TokenItem,
)
from runlane_sqs.adapters.dynamodb.writes import RunWrite
from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.claims import HintedClaim
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.indexes import AgendaKind, agenda_pk
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import (
    LEASED_STATUSES,
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    Lease,
    Run,
    RunStatus,
)
from runlane_sqs.core.tokens import TokenDecision
from runlane_sqs.core.values import stored_text

Request = dict[str, Any]
"""A DynamoDB request: the keyword arguments of one low-level client call."""


def expressions(
    request: Request, *, condition: Condition | None = None, actions: list[Action] | None = None
) -> Request:
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    if actions:
        request["UpdateExpression"] = Update(*actions).serialize(names, values)
    if condition is not None:
        request["ConditionExpression"] = condition.serialize(names, values)
    if names:
        request["ExpressionAttributeNames"] = {ph: name for name, ph in names.items()}
    if values:
        request["ExpressionAttributeValues"] = values
    return request


def get_run(table: str, environment: str, run_id: str) -> Request:
    """Strongly consistent read of one run item."""
    return {"TableName": table, "Key": keys.run_key(environment, run_id), "ConsistentRead": True}


def put_run(table: str, item: AttributeMap) -> Request:
    """Create a run; run ids are random, the condition guards against reuse."""
    return expressions(
        {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"},
        condition=RunItem.pk.does_not_exist(),
    )


def apply_transition(table: str, transition: Transition) -> Request:
    """Write one state change and append its events, if nothing changed since it was read.

    Only attributes whose value changes are written. The condition is the sequence
    the decision was made on, plus the attempt's lease token for attempt writes.
    """
    before, after = transition.before, transition.after
    old, new = run_state_attributes(before), run_state_attributes(after)
    write = RunWrite()
    for name, value in new.items():
        if value != old[name] or name in INDEX_ATTRIBUTES:
            write.set(name, value)
    for name, added in map_additions(before, after).items():
        for key, text in added.items():
            write.set_map_key(name, key, text)
    if transition.events:
        write.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in transition.events])
    write.require("seq", "=", before.seq)
    if transition.fence is not None:
        write.require("lease_token", "=", transition.fence)
    for name in transition.guard:
        write.require_equal_or_absent(name, old[name])
    request: Request = {
        "TableName": table,
        "Key": keys.run_key(after.environment, after.id),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if after.is_terminal:
        request["ReturnValues"] = "ALL_NEW"  # says whether another run waits for this one
    return write.request(request)


RUNNABLE = sorted(status.value for status in RUNNABLE_STATUSES)

CLAIM_WRITES = (
    "status",
    "seq",
    "attempt",
    "updated_at",
    "due_at",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "deadline_at",
    "wake_at",
    "line_at",
    "publishes",
    "waiting",
    "wait_pk",
    "wait_sk",
    "status_pk",
)
"""Every attribute a claim sets or removes (the rest of the run item stays as it is),
besides its agenda entry."""
LISTING = ("agenda_pk", "agenda_at")


def claim_hinted(table: str, claim: HintedClaim) -> Request:
    """Claim without a read: write every attribute a claim sets, if the run is still as
    the wakeup's hint says (same seq, attempt and task), runnable, due, and waiting for
    nothing but a time (no waits-index entry). Returns the claimed item.

    A run listed on the agenda early enough (:meth:`HintedClaim.keeps_listing`) keeps
    its entry: the write leaves ``agenda_at`` as it is, on condition that it is still
    the hinted time, so the claim writes nothing to the agenda index."""
    blind = claim.blind()
    values = run_state_attributes(blind.after)
    keeps_listing = claim.keeps_listing()
    write = RunWrite()
    for name in CLAIM_WRITES if keeps_listing else CLAIM_WRITES + LISTING:
        write.set(name, values[name])
    if claim.hint.attempt == 0 and claim.app_version is not None:
        write.set("app_version", claim.app_version)  # a first attempt: the run's version
    write.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in blind.events])
    hint = claim.hint
    write.require("seq", "=", hint.seq)
    write.require("attempt", "=", hint.attempt)
    write.require("task", "=", hint.task)
    write.require_in("status", RUNNABLE)
    write.require("due_at", "<=", to_epoch_ms(blind.after.updated_at))
    write.require_absent("wait_pk")
    if keeps_listing:
        assert hint.review_at is not None
        write.require("agenda_at", "=", to_epoch_ms(hint.review_at))
    return write.request(
        {
            "TableName": table,
            "Key": keys.run_key(claim.environment, claim.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def collapse_run(table: str, environment: str, collapse: Collapse) -> Request:
    """A debounced trigger collapsing into its key's pending run: its payload and due
    time replaced, one more collapse counted, no event appended, if the run has not
    started (queued, no attempt, no lease) and, with a merge, holds the collapses the
    merge read. Returns the stored run."""
    wake = collapse.wake_at
    listed = wake if wake is not None else collapse.due_at
    condition = not_started_with(RunItem.debounce_key, collapse.key)
    if collapse.seen is not None:
        counted = RunItem.collapsed == collapse.seen
        condition &= RunItem.collapsed.does_not_exist() | counted if not collapse.seen else counted
    actions: list[Action] = [
        RunItem.payload.set(collapse.payload_text),
        RunItem.due_at.set(to_epoch_ms(collapse.due_at)),
        RunItem.updated_at.set(to_epoch_ms(collapse.now)),
        RunItem.agenda_at.set(to_epoch_ms(listed)),
        RunItem.line_at.remove(),
        RunItem.publishes.remove(),
        RunItem.collapsed.add(1),
        RunItem.wake_at.set(to_epoch_ms(wake)) if wake is not None else RunItem.wake_at.remove(),
    ]
    return expressions(
        {
            "TableName": table,
            "Key": keys.run_key(environment, collapse.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        condition=condition,
        actions=actions,
    )


def not_started_with(key_attribute: UnicodeAttribute, key: str) -> Condition:
    """The run has not started (queued, no attempt, no lease) and holds ``key``."""
    condition: Condition = (
        (RunItem.status == RunStatus.QUEUED.value)
        & (RunItem.attempt == 0)
        & (key_attribute == key)
        & RunItem.lease_token.does_not_exist()
    )
    return condition


def append_item(table: str, environment: str, append: Append) -> Request:
    """A batched trigger adding its item to its key's pending run: appended to the run's
    items, one more counted, no event, if the run has not started, holds fewer than
    ``size`` items and has room for the item's bytes. Returns the stored run."""
    room = append.max_bytes - append.item_bytes
    return expressions(
        {
            "TableName": table,
            "Key": keys.run_key(environment, append.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        condition=not_started_with(RunItem.batch_key, append.key)
        & (size(RunItem.batch_items) < append.size)  # type: ignore[no-untyped-call]
        & (RunItem.batch_bytes <= room),
        actions=[
            RunItem.batch_items.set(RunItem.batch_items.append([append.item_text])),
            RunItem.batch_bytes.add(append.item_bytes),
            RunItem.collapsed.add(1),
            RunItem.updated_at.set(to_epoch_ms(append.now)),
        ],
    )


def fill_batch(table: str, environment: str, fill: Fill) -> Request:
    """A full batch made due now (its agenda entry with it), if it has not started and
    is due later. Returns the stored run."""
    now_ms = to_epoch_ms(fill.now)
    wake = fill.wake_at
    listing = RunItem.wake_at.set(to_epoch_ms(wake)) if wake else RunItem.wake_at.remove()
    return expressions(
        {
            "TableName": table,
            "Key": keys.run_key(environment, fill.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        condition=not_started_with(RunItem.batch_key, fill.key) & (RunItem.due_at > now_ms),
        actions=[
            RunItem.due_at.set(now_ms),
            RunItem.updated_at.set(now_ms),
            RunItem.agenda_at.set(to_epoch_ms(wake) if wake is not None else now_ms),
            RunItem.line_at.remove(),
            RunItem.publishes.remove(),
            listing,
        ],
    )


def watch_run(table: str, environment: str, run_id: str) -> Request:
    """Mark a run as awaited by another; returns it (no event, no sequence change)."""
    return expressions(
        {
            "TableName": table,
            "Key": keys.run_key(environment, run_id),
            "ReturnValues": "ALL_NEW",
        },
        condition=RunItem.pk.exists(),
        actions=[RunItem.watched.set(1)],
    )


def query_waiters(table: str, partition: str, limit: int) -> Request:
    """One page of the runs waiting for one signal key, token or run."""
    return {
        "TableName": table,
        "IndexName": WAITS_INDEX,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": "wait_pk"},
        "ExpressionAttributeValues": {":pk": {"S": partition}},
        "Limit": limit,
    }


def lease_renewal(table: str, run: Run, lease: Lease) -> Request:
    """Extend the attempt's lease (no event); refused once the token is no longer current.

    The run's agenda entry stays where it is, earlier than the new expiry: maintenance
    looks at the run then and lists it at its lease expiry (so a heartbeat writes
    nothing to the agenda index)."""
    write = RunWrite()
    write.set("lease_expires_at", to_epoch_ms(lease.expires_at))
    write.require("lease_token", "=", lease.token)
    write.require_in("status", [s.value for s in LEASED_STATUSES])
    return write.request(
        {
            "TableName": table,
            "Key": keys.run_key(run.environment, run.id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def claim_key(
    table: str,
    pk: str,
    run_id: str,
    *,
    now_ms: int,
    expires_s: int | None,
    previous_owner: str | None,
) -> Request:
    """Take an idempotency/singleton key for ``run_id``.

    Succeeds if the key is free, expired (TTL deletion can lag by days), or still held by
    ``previous_owner``, a run the caller saw finished and so no longer owning it.
    """
    item = KeyItem(pk=pk, sk=keys.KEY_SK, run_id=run_id, created_at=now_ms, expires_at=expires_s)
    free = KeyItem.pk.does_not_exist() | (KeyItem.expires_at < now_ms // 1000)
    if previous_owner is not None:
        free |= KeyItem.run_id == previous_owner
    return expressions(
        {
            "TableName": table,
            "Item": item.serialize(),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        condition=free,
    )


def release_key(table: str, pk: str, run_id: str) -> Request:
    """Give a key back, only if ``run_id`` still holds it."""
    return expressions(
        {"TableName": table, "Key": keys.key_item_key(pk)},
        condition=KeyItem.run_id == run_id,
    )


def get_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk), "ConsistentRead": True}


def query_agenda(table: str, partition: str, until_ms: int, limit: int) -> Request:
    """One page of the agenda index: runs in ``partition`` due for a look by ``until_ms``."""
    return {
        "TableName": table,
        "IndexName": AGENDA_INDEX,
        "KeyConditionExpression": "#pk = :pk AND #at <= :until",
        "ExpressionAttributeNames": {"#pk": "agenda_pk", "#at": "agenda_at"},
        "ExpressionAttributeValues": {":pk": {"S": partition}, ":until": {"N": str(until_ms)}},
        "Limit": limit,
    }


def query_cursors(table: str, environment: str) -> Request:
    """Every maintenance cursor of the environment (one small partition)."""
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
        "ExpressionAttributeValues": {
            ":pk": {"S": keys.maintenance_pk(environment)},
            ":prefix": {"S": keys.CURSOR_SK_PREFIX},
        },
        "ConsistentRead": True,
    }


def put_cursor(table: str, environment: str, partition: str, cursor: str) -> Request:
    return {
        "TableName": table,
        "Item": {
            "pk": {"S": keys.maintenance_pk(environment)},
            "sk": {"S": keys.cursor_sk(partition)},
            "cursor": {"S": cursor},
        },
    }


def delete_cursor(table: str, environment: str, partition: str) -> Request:
    return {
        "TableName": table,
        "Key": {
            "pk": {"S": keys.maintenance_pk(environment)},
            "sk": {"S": keys.cursor_sk(partition)},
        },
    }


def query_drained(table: str, environment: str) -> Request:
    """When each queue was last seen drained (beside the cursors)."""
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
        "ExpressionAttributeValues": {
            ":pk": {"S": keys.maintenance_pk(environment)},
            ":prefix": {"S": keys.DRAINED_SK_PREFIX},
        },
        "ConsistentRead": True,
    }


def put_drained(table: str, environment: str, queue: str, at_ms: int) -> Request:
    """Keep the later drained time only (overlapping passes never move it back)."""
    return {
        "TableName": table,
        "Item": {
            "pk": {"S": keys.maintenance_pk(environment)},
            "sk": {"S": keys.drained_sk(queue)},
            "drained_at": {"N": str(at_ms)},
        },
        "ConditionExpression": "attribute_not_exists(drained_at) OR drained_at < :at",
        "ExpressionAttributeValues": {":at": {"N": str(at_ms)}},
    }


def put_token(table: str, item: AttributeMap) -> Request:
    return expressions({"TableName": table, "Item": item}, condition=TokenItem.pk.does_not_exist())


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
    actions: list[Action] = [
        TokenItem.token_status.set(decision.status.value),
        TokenItem.decided_at.set(decided_ms),
        TokenItem.agenda_pk.set(agenda_pk(environment, kind, decision.token_id)),
        TokenItem.agenda_at.set(decided_ms),
    ]
    if decision.value is not None:
        actions.append(TokenItem.value.set(stored_text(decision.value)))
    if decision.trace is not None:
        actions.append(TokenItem.decision_trace.set(decision.trace))
    return expressions(
        {
            "TableName": table,
            "Key": keys.token_key(environment, decision.token_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        condition=TokenItem.pk.exists() & (TokenItem.token_status == "pending"),
        actions=actions,
    )


def finish_token_resume(table: str, environment: str, token_id: str) -> Request:
    """Take a decided token off the agenda once no waiter is left to resume."""
    return expressions(
        {"TableName": table, "Key": keys.token_key(environment, token_id)},
        condition=TokenItem.token_status != "pending",
        actions=[TokenItem.agenda_pk.remove(), TokenItem.agenda_at.remove()],
    )


def query_status(
    table: str,
    partition: str,
    *,
    after_sk: str | None,
    below_sk: str | None,
    task: str | None,
    queue: str | None,
    limit: int,
) -> Request:
    """Runs of one status-index partition, newest first, optionally created at or after
    ``after_sk`` and strictly below ``below_sk``, filtered by task and queue (attributes
    the index carries)."""
    names = {"#pk": "status_pk"}
    values: dict[str, Any] = {":pk": {"S": partition}}
    condition = "#pk = :pk"
    if after_sk is not None or below_sk is not None:
        names["#sk"] = "created_sk"  # DynamoDB rejects names an expression does not use
    if after_sk is not None and below_sk is not None:
        # BETWEEN includes its upper bound: the caller drops a run at exactly below_sk
        condition += " AND #sk BETWEEN :after AND :below"
        values.update({":after": {"S": after_sk}, ":below": {"S": below_sk}})
    elif after_sk is not None:
        condition += " AND #sk >= :after"
        values[":after"] = {"S": after_sk}
    elif below_sk is not None:
        condition += " AND #sk < :below"
        values[":below"] = {"S": below_sk}
    filters = []
    for name, value in (("task", task), ("queue", queue)):
        if value is not None:
            names[f"#{name}"] = name
            values[f":{name}"] = {"S": value}
            filters.append(f"#{name} = :{name}")
    request: Request = {
        "TableName": table,
        "IndexName": STATUS_INDEX,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        "Limit": limit,
    }
    if filters:
        request["FilterExpression"] = " AND ".join(filters)
    return request


def batch_get_runs(table: str, run_keys: list[dict[str, Any]]) -> Request:
    """Read up to 100 run items at once (strongly consistent)."""
    return {"RequestItems": {table: {"Keys": run_keys, "ConsistentRead": True}}}


def delete_run(table: str, run: Run) -> Request:
    """Remove a finished run (with its inline history and steps) if it did not change."""
    condition = (RunItem.seq == run.seq) & RunItem.status.is_in(
        *(s.value for s in TERMINAL_STATUSES)
    )
    return expressions(
        {"TableName": table, "Key": keys.run_key(run.environment, run.id)}, condition=condition
    )


def delete_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk)}
