"""Every DynamoDB request the run store sends, one named builder per operation.

Builders return the keyword arguments of the low-level client call, so the sync
(boto3) and async (aioboto3) adapters send exactly the same requests. Conditions and
updates are written with :class:`~runlane_sqs.adapters.dynamodb.expressions.Expressions`,
typed by the models of :mod:`.items`.

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

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import (
    HISTORY_ATTRIBUTE,
    INDEX_ATTRIBUTES,
    AttributeMap,
    event_to_wire,
    map_additions,
    run_state_attributes,
)
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import (
    AGENDA_INDEX,
    STATUS_INDEX,
    WAITS_INDEX,
    KeyItem,
    RunItem,
    TokenItem,
)
from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.indexes import AgendaKind, agenda_pk
from runlane_sqs.core.machine import HintedClaim, Transition
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


def get_run(table: str, environment: str, run_id: str) -> Request:
    """Strongly consistent read of one run item."""
    return {"TableName": table, "Key": keys.run_key(environment, run_id), "ConsistentRead": True}


def put_run(table: str, item: AttributeMap) -> Request:
    """Create a run; run ids are random, the condition guards against reuse."""
    x = Expressions(RunItem)
    x.require(x.absent("pk"))
    return x.request(
        {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    )


def apply_transition(table: str, transition: Transition) -> Request:
    """Write one state change and append its events, if nothing changed since it was read.

    Only attributes whose value changes are written. The condition is the sequence
    the decision was made on, plus the attempt's lease token for attempt writes.
    """
    after = transition.after
    request: Request = {
        "TableName": table,
        "Key": keys.run_key(after.environment, after.id),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if after.is_terminal:
        request["ReturnValues"] = "ALL_NEW"  # says whether another run waits for this one
    return transition_write(transition).request(request)


def transition_write(transition: Transition) -> Expressions:
    """The expressions of :func:`apply_transition` (a slot transaction adds to them)."""
    before, after = transition.before, transition.after
    old, new = run_state_attributes(before), run_state_attributes(after)
    x = Expressions(RunItem)
    for name, value in new.items():
        if value != old[name] or name in INDEX_ATTRIBUTES:
            x.set(name, value)
    for name, added in map_additions(before, after).items():
        for key, text in added.items():
            x.set((name, key), text)
    if transition.events:
        x.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in transition.events])
    x.require(x.compare("seq", "=", before.seq))
    if transition.fence is not None:
        x.require(x.compare("lease_token", "=", transition.fence))
    for name in transition.guard:
        x.require(x.equal_or_absent(name, old[name]))
    return x


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
    x = Expressions(RunItem)
    for name in CLAIM_WRITES if keeps_listing else CLAIM_WRITES + LISTING:
        x.set(name, values[name])
    if claim.hint.attempt == 0 and claim.app_version is not None:
        x.set("app_version", claim.app_version)  # a first attempt: the run's version
    x.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in blind.events])
    hint = claim.hint
    x.require(
        x.compare("seq", "=", hint.seq),
        x.compare("attempt", "=", hint.attempt),
        x.compare("task", "=", hint.task),
        x.is_in("status", RUNNABLE),
        x.compare("due_at", "<=", to_epoch_ms(blind.after.updated_at)),
        x.absent("wait_pk"),
    )
    if keeps_listing:
        assert hint.review_at is not None
        x.require(x.compare("agenda_at", "=", to_epoch_ms(hint.review_at)))
    return x.request(
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
    x = Expressions(RunItem)
    require_not_started(x, "debounce_key", collapse.key)
    if collapse.seen is not None:
        counted = x.compare("collapsed", "=", collapse.seen)
        x.require(x.either(x.absent("collapsed"), counted) if not collapse.seen else counted)
    x.set("payload", collapse.payload_text)
    x.set("due_at", to_epoch_ms(collapse.due_at))
    x.set("updated_at", to_epoch_ms(collapse.now))
    x.set("agenda_at", to_epoch_ms(listed))
    x.remove("line_at", "publishes")
    x.add("collapsed", 1)
    x.set("wake_at", to_epoch_ms(wake) if wake is not None else None)
    return x.request(
        {
            "TableName": table,
            "Key": keys.run_key(environment, collapse.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def require_not_started(x: Expressions, key_attribute: str, key: str) -> None:
    """The run has not started (queued, no attempt, no lease) and holds ``key``."""
    x.require(
        x.compare("status", "=", RunStatus.QUEUED.value),
        x.compare("attempt", "=", 0),
        x.compare(key_attribute, "=", key),
        x.absent("lease_token"),
    )


def append_item(table: str, environment: str, append: Append) -> Request:
    """A batched trigger adding its item to its key's pending run: appended to the run's
    items, one more counted, no event, if the run has not started, holds fewer than
    ``size`` items and has room for the item's bytes. Returns the stored run."""
    room = append.max_bytes - append.item_bytes
    x = Expressions(RunItem)
    require_not_started(x, "batch_key", append.key)
    x.require(
        x.compare(x.size("batch_items"), "<", append.size),
        x.compare("batch_bytes", "<=", room),
    )
    x.append("batch_items", [{"S": append.item_text}])
    x.add("batch_bytes", append.item_bytes)
    x.add("collapsed", 1)
    x.set("updated_at", to_epoch_ms(append.now))
    return x.request(
        {
            "TableName": table,
            "Key": keys.run_key(environment, append.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def fill_batch(table: str, environment: str, fill: Fill) -> Request:
    """A full batch made due now (its agenda entry with it), if it has not started and
    is due later. Returns the stored run."""
    now_ms = to_epoch_ms(fill.now)
    wake = fill.wake_at
    x = Expressions(RunItem)
    require_not_started(x, "batch_key", fill.key)
    x.require(x.compare("due_at", ">", now_ms))
    x.set("due_at", now_ms)
    x.set("updated_at", now_ms)
    x.set("agenda_at", to_epoch_ms(wake) if wake is not None else now_ms)
    x.remove("line_at", "publishes")
    x.set("wake_at", to_epoch_ms(wake) if wake else None)
    return x.request(
        {
            "TableName": table,
            "Key": keys.run_key(environment, fill.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def watch_run(table: str, environment: str, run_id: str) -> Request:
    """Mark a run as awaited by another; returns it (no event, no sequence change)."""
    x = Expressions(RunItem)
    x.set("watched", 1)
    x.require(x.exists("pk"))
    return x.request(
        {"TableName": table, "Key": keys.run_key(environment, run_id), "ReturnValues": "ALL_NEW"}
    )


def query_waiters(table: str, partition: str, limit: int) -> Request:
    """One page of the runs waiting for one signal key, token or run."""
    x = Expressions()
    x.key(x.compare("wait_pk", "=", partition))
    return x.request({"TableName": table, "IndexName": WAITS_INDEX, "Limit": limit})


def lease_renewal(table: str, run: Run, lease: Lease) -> Request:
    """Extend the attempt's lease (no event); refused once the token is no longer current.

    The run's agenda entry stays where it is, earlier than the new expiry: maintenance
    looks at the run then and lists it at its lease expiry (so a heartbeat writes
    nothing to the agenda index)."""
    x = Expressions(RunItem)
    x.set("lease_expires_at", to_epoch_ms(lease.expires_at))
    x.require(
        x.compare("lease_token", "=", lease.token),
        x.is_in("status", [s.value for s in LEASED_STATUSES]),
    )
    return x.request(
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
    x = Expressions(KeyItem)
    free = [x.absent("pk"), x.compare("expires_at", "<", now_ms // 1000)]
    if previous_owner is not None:
        free.append(x.compare("run_id", "=", previous_owner))
    x.require(x.either(*free))
    return x.request(
        {
            "TableName": table,
            "Item": item.serialize(),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )


def release_key(table: str, pk: str, run_id: str) -> Request:
    """Give a key back, only if ``run_id`` still holds it."""
    x = Expressions(KeyItem)
    x.require(x.compare("run_id", "=", run_id))
    return x.request({"TableName": table, "Key": keys.key_item_key(pk)})


def get_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk), "ConsistentRead": True}


def query_agenda(table: str, partition: str, until_ms: int, limit: int) -> Request:
    """One page of the agenda index: runs in ``partition`` due for a look by ``until_ms``."""
    x = Expressions()
    x.key(x.compare("agenda_pk", "=", partition), x.compare("agenda_at", "<=", until_ms))
    return x.request({"TableName": table, "IndexName": AGENDA_INDEX, "Limit": limit})


def query_cursors(table: str, environment: str) -> Request:
    """Every maintenance cursor of the environment (one small partition)."""
    return query_maintenance(table, environment, keys.CURSOR_SK_PREFIX)


def query_maintenance(table: str, environment: str, prefix: str) -> Request:
    """The maintenance items of the environment whose sort key starts with ``prefix``."""
    x = Expressions()
    x.key(
        x.compare("pk", "=", keys.maintenance_pk(environment)),
        x.begins_with("sk", prefix),
    )
    return x.request({"TableName": table, "ConsistentRead": True})


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
    return query_maintenance(table, environment, keys.DRAINED_SK_PREFIX)


def put_drained(table: str, environment: str, queue: str, at_ms: int) -> Request:
    """Keep the later drained time only (overlapping passes never move it back)."""
    x = Expressions()
    x.require(x.either(x.absent("drained_at"), x.compare("drained_at", "<", at_ms)))
    return x.request(
        {
            "TableName": table,
            "Item": {
                "pk": {"S": keys.maintenance_pk(environment)},
                "sk": {"S": keys.drained_sk(queue)},
                "drained_at": {"N": str(at_ms)},
            },
        }
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
    x = Expressions()
    x.key(x.compare("status_pk", "=", partition))
    if after_sk is not None and below_sk is not None:
        # BETWEEN includes its upper bound: the caller drops a run at exactly below_sk
        x.key(x.between("created_sk", after_sk, below_sk))
    elif after_sk is not None:
        x.key(x.compare("created_sk", ">=", after_sk))
    elif below_sk is not None:
        x.key(x.compare("created_sk", "<", below_sk))
    for name, value in (("task", task), ("queue", queue)):
        if value is not None:
            x.filter(x.compare(name, "=", value))
    return x.request(
        {"TableName": table, "IndexName": STATUS_INDEX, "ScanIndexForward": False, "Limit": limit}
    )


def batch_get_runs(table: str, run_keys: list[dict[str, Any]]) -> Request:
    """Read up to 100 run items at once (strongly consistent)."""
    return {"RequestItems": {table: {"Keys": run_keys, "ConsistentRead": True}}}


def delete_run(table: str, run: Run) -> Request:
    """Remove a finished run (with its inline history and steps) if it did not change."""
    x = Expressions(RunItem)
    x.require(
        x.compare("seq", "=", run.seq), x.is_in("status", [s.value for s in TERMINAL_STATUSES])
    )
    return x.request({"TableName": table, "Key": keys.run_key(run.environment, run.id)})


def delete_key(table: str, pk: str) -> Request:
    return {"TableName": table, "Key": keys.key_item_key(pk)}
