"""The run item: the one item (``RUN#{environment}#{run_id}`` / ``RUN``) that holds a
run's state, its payload and result, its steps' and waits' results and its whole
history (docs/design/storage.md, "Run item").

This module converts runs to the item's wire format and back, and builds every request
that reads or writes a run item, one named builder per operation: the per-message
path's writes (the trigger's, the claim's and the outcome's) are built in this one
module, beside the attributes they write.

Times are stored as whole epoch milliseconds; failure and event data as compact JSON
text; payload, result, step and wait results as their stored text
(:mod:`runlane_sqs.core.values`: compact JSON, or the envelope of a sealed value).
Index attributes are derived from the run's state here, so every write keeps the
indexes consistent with the state it writes.

Builders return the keyword arguments of the low-level client call
(:data:`~runlane_sqs.adapters.dynamodb.requests.Request`), so the sync (boto3) and async
(aioboto3) adapters send exactly the same requests. Conditions and updates are written
with :class:`~runlane_sqs.adapters.dynamodb.expressions.Expressions`, typed by
:class:`~runlane_sqs.adapters.dynamodb.items.RunItem`.

Timeline of a plain run (three writes, no transaction, no read):

    trigger   PutItem     if the run item does not exist
    claim     UpdateItem  if seq, attempt, task = the wakeup's hint, runnable, due  (-> running)
    outcome   UpdateItem  if seq = seen seq and lease_token = own (-> succeeded/retrying/failed)

The claim on a wakeup's hint is :func:`claim_hinted`; a wakeup without a hint (or whose
hint no longer holds) is claimed after a read, with ``UpdateItem if seq = seen seq``.

Heartbeats are ``UpdateItem if lease_token = own and status is leased`` and append
no event; so are progress reports (:func:`progress_report`, at most one per run per
interval; the last one rides on the outcome's write). Triggers with idempotency or
singleton keys write the key items and the run in one ``TransactWriteItems``
(:mod:`runlane_sqs.adapters.dynamodb.transactions`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import (
    STATUS_INDEX,
    TAG_INDEXES,
    TAG_KEY_ATTRIBUTES,
    WAITS_INDEX,
    AttributeMap,
    EventMap,
    RunItem,
)
from runlane_sqs.adapters.dynamodb.keys import run_listing
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.clock import EPOCH, ONE_MS, to_epoch_ms
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.machine import HintedClaim, Transition, agenda_entry
from runlane_sqs.core.model import (
    LEASED_STATUSES,
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    EventType,
    Failure,
    Lease,
    Progress,
    Run,
    RunEvent,
    RunStatus,
    Slot,
    Wait,
    WaitKind,
)
from runlane_sqs.core.ordering import turn_passed
from runlane_sqs.core.progress import (
    AttemptReport,
    progress_from_text,
    progress_text,
    state_from_text,
)
from runlane_sqs.core.slots import slots_freed, slots_taken
from runlane_sqs.core.values import Reference, Sealed, added_references, decode_json, stored_text


def compact_json(value: Any) -> str:
    """JSON text as stored: compact, Unicode kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# Every time an item holds is whole milliseconds since the epoch (the rule of
# core/clock.py's to_epoch_ms and from_epoch_ms), converted here, in the inner loop
# over a run item's attributes (the token item's times too, in tokens.py).


def to_ms(at: datetime) -> int:
    return (at - EPOCH) // ONE_MS


def to_ms_or_none(at: datetime | None) -> int | None:
    return (at - EPOCH) // ONE_MS if at is not None else None


def from_ms(ms: int) -> datetime:
    return EPOCH + ms * ONE_MS


def event_to_map(event: RunEvent) -> EventMap:
    return EventMap(  # type: ignore[no-untyped-call]
        seq=event.seq,
        type=event.type.value,
        at=to_ms(event.at),
        attempt=event.attempt,
        data=compact_json(event.data) if event.data else None,
    )


def event_to_wire(event: RunEvent) -> AttributeMap:
    """An event in the wire format :func:`event_to_map` serialises to."""
    attributes: AttributeMap = {
        "seq": {"N": str(event.seq)},
        "type": {"S": event.type.value},
        "at": {"N": str(to_ms(event.at))},
        "attempt": {"N": str(event.attempt)},
    }
    if event.data:
        attributes["data"] = {"S": compact_json(event.data)}
    return {"M": attributes}


def event_from_map(stored: EventMap) -> RunEvent:
    return RunEvent(
        seq=int(stored.seq),
        type=EventType(stored.type),
        at=from_ms(int(stored.at)),
        attempt=int(stored.attempt),
        data=json.loads(stored.data) if stored.data else {},
    )


_KEEPS_WAIT = frozenset({RunStatus.RELEASED, RunStatus.PARKED})
"""Statuses whose stored run keeps its wait (a parked run returns to it when unparked)."""


def run_state_attributes(run: Run) -> dict[str, Any]:
    """The python values of every state attribute (``None`` means absent)."""
    lease = run.lease
    listing = run_listing(run)
    waiting = run.waiting if run.status in _KEEPS_WAIT else None
    slot_wait = run.slot_wait if run.status.is_runnable else None
    return {
        "status": run.status.value,
        "seq": run.seq,
        "attempt": run.attempt,
        "updated_at": to_ms(run.updated_at),
        "due_at": to_ms_or_none(run.due_at),
        "lease_owner": lease.owner if lease else None,
        "lease_token": lease.token if lease else None,
        "lease_expires_at": to_ms(lease.expires_at) if lease else None,
        "result": stored_text(run.result) if run.result is not None else None,
        "failure": compact_json(run.failure.to_json()) if run.failure else None,
        "deadline_at": to_ms_or_none(run.deadline_at),
        "lease_losses": run.lease_losses or None,
        "wake_at": to_ms_or_none(run.wake_at),
        "line_at": to_ms_or_none(run.line_at),
        "publishes": run.publishes or None,
        "failures": run.failures or None,
        "waiting": compact_json(waiting.to_json()) if waiting else None,
        "parked_from": run.parked_from.value if run.parked_from else None,
        "parked_reason": run.parked_reason,
        "slots": compact_json([[s.scope, s.limit] for s in run.slots]) if run.slots else None,
        "slot_wait": slot_wait,
        "rate_start": to_ms_or_none(run.rate_start),
        "app_version": run.app_version,
        "collapsed": run.collapsed or None,
        "progress": progress_text(run.progress) if run.progress is not None else None,
        "state": stored_text(run.state) if run.state is not None else None,
        "expires_at": expiry_of(run),
        "turn_wait": 1 if run.turn_wait else None,
        "wait_pk": wait_partition(run),
        "wait_sk": wait_sort_key(run) if waiting or slot_wait else None,
        "status_pk": listing.status_pk,
        "agenda_pk": listing.agenda_pk,
        "agenda_at": to_ms(listing.agenda_at) if listing.agenda_at else None,
    }


HISTORY_ATTRIBUTE = "events"
"""The run's events, appended to by every write that records one."""
INDEX_ATTRIBUTES = ("status_pk", "agenda_pk", "agenda_at", "wait_pk", "wait_sk")
"""Written on every transition, whatever the diff says, so indexes never go stale."""
MAP_ATTRIBUTES = ("wait_results", "steps")
"""Maps whose entries are only ever added: a write sets the new entries by path, so it
needs no knowledge of the others (index items do not carry these maps)."""


def map_key(name: str) -> str:
    """Step and wait names percent-encoded: a document path must not see ``.``, ``[``
    or ``]`` in a map key (they would read as nesting or a list index)."""
    return quote(name, safe="")


def wait_partition(run: Run) -> str | None:
    """Where a released run is listed on the waits index (time waits are not), or a
    runnable run that waits for a concurrency slot."""
    if run.slot_wait is not None and run.status.is_runnable:
        return keys.wait_pk(run.environment, keys.SLOT_WAIT, run.slot_wait)
    waiting = run.waiting
    if run.status is not RunStatus.RELEASED or waiting is None or waiting.target is None:
        return None
    if waiting.kind is WaitKind.TIME:
        return None
    return keys.wait_pk(run.environment, waiting.kind.value, waiting.target)


def wait_sort_key(run: Run) -> str:
    """Waiters for a slot are woken oldest first: their entries sort by creation time.
    Other waiters are all resumed at once; their entries are the run id."""
    if run.slot_wait is None:
        return run.id
    return keys.created_sk(to_ms(run.created_at), run.id)


def map_additions(before: Run, after: Run) -> dict[str, dict[str, str]]:
    """New entries of each only-added map, as JSON text by key."""
    additions: dict[str, dict[str, str]] = {}
    for name in MAP_ATTRIBUTES:
        old, new = getattr(before, name), getattr(after, name)
        added = {map_key(k): stored_text(v) for k, v in new.items() if k not in old}
        if added:
            additions[name] = added
    return additions


def run_to_item(run: Run, events: list[RunEvent], payload_text: str) -> RunItem:
    created_ms = to_ms(run.created_at)
    tag_keys: dict[str, Any] = keys.run_tag_keys(run) if run.tags else {}
    pk, created_sk = keys.run_pk(run.environment, run.id), keys.created_sk(created_ms, run.id)
    item = RunItem(
        pk=pk,
        sk=keys.RUN_SK,
        run_id=run.id,
        environment=run.environment,
        task=run.task,
        queue=run.queue,
        payload=None if run.batch_key else payload_text,
        batch_items=[payload_text] if run.batch_key else None,
        batch_bytes=len(payload_text.encode("utf-8")) if run.batch_key else None,
        created_at=created_ms,
        idempotency_key=run.idempotency_key,
        singleton_key=run.singleton_key,
        source_run_id=run.source_run_id,
        source_kind=run.source_kind,
        schedule_id=run.schedule_id,
        scheduled_for=to_ms(run.scheduled_for) if run.scheduled_for else None,
        concurrency_key=run.concurrency_key,
        ordering_key=run.ordering_key,
        place=run.place,
        trace=run.trace,
        group_id=run.group_id,
        group_index=run.group_index,
        joined_group=run.joined_group,
        debounce_key=run.debounce_key,
        batch_key=run.batch_key,
        retention=int(run.retention.total_seconds()) if run.retention else None,
        events=[event_to_map(e) for e in events],
        steps={map_key(k): stored_text(v) for k, v in run.steps.items()},
        wait_results={map_key(k): stored_text(v) for k, v in run.wait_results.items()},
        created_sk=created_sk,
        tags=dict(run.tags) if run.tags else None,
        **tag_keys,
        **run_state_attributes(run),
    )
    return item


def run_to_wire(run: Run, events: list[RunEvent], payload_text: str) -> AttributeMap:
    wire: AttributeMap = run_to_item(run, events, payload_text).serialize()
    return wire


def item_from_wire(wire: AttributeMap) -> RunItem:
    item: RunItem = RunItem.from_raw_data(wire)
    return item


class _Attributes:
    """Reads one item's attributes straight from the wire format: every run attribute is
    a string, a number, or a map of strings. PynamoDB's model builds and copies an
    attribute object per value: 118 µs per claimed item against 18 µs read here
    (docs/performance.md, "Worker CPU")."""

    __slots__ = ("wire",)

    def __init__(self, wire: AttributeMap) -> None:
        self.wire = wire

    def text(self, name: str) -> str | None:
        value = self.wire.get(name)
        return value["S"] if value is not None and "S" in value else None

    def required_text(self, name: str) -> str:
        value = self.text(name)
        if value is None:
            raise ValueError(f"run item without {name!r}")
        return value

    def number(self, name: str) -> int | None:
        value = self.wire.get(name)
        return int(value["N"]) if value is not None and "N" in value else None

    def time(self, name: str) -> datetime | None:
        value = self.wire.get(name)
        return EPOCH + int(value["N"]) * ONE_MS if value is not None and "N" in value else None

    def required_time(self, name: str) -> datetime:
        value = self.time(name)
        if value is None:
            raise ValueError(f"run item without {name!r}")
        return value

    def text_map(self, name: str) -> dict[str, str]:
        value = self.wire.get(name)
        if value is None or "M" not in value:
            return {}
        return {k: v["S"] for k, v in sorted(value["M"].items())}

    def json_map(self, name: str) -> dict[str, Any]:
        value = self.wire.get(name)
        if value is None or "M" not in value:
            return {}
        return {unquote(k): decode_json(v["S"]) for k, v in value["M"].items()}


def run_from_wire(wire: AttributeMap) -> Run:
    """The run an item holds. Its history is not part of a ``Run`` and is not decoded
    (it is the largest attribute, and every attempt write reads the item back)."""
    item = _Attributes(wire)
    lease = None
    token = item.text("lease_token")
    if token is not None:
        lease = Lease(
            owner=item.text("lease_owner") or "",
            token=token,
            expires_at=item.required_time("lease_expires_at"),
        )
    waiting, failure, parked_from = (
        item.text("waiting"),
        item.text("failure"),
        item.text("parked_from"),
    )
    payload, result = decode_json(item.text("payload")), decode_json(item.text("result"))
    if "batch_items" in wire:  # a batch: its items, in the order they were added
        payload = [decode_json(entry["S"]) for entry in wire["batch_items"]["L"]]
    run = Run(
        id=item.required_text("run_id"),
        environment=item.required_text("environment"),
        task=item.required_text("task"),
        queue=item.required_text("queue"),
        status=RunStatus(item.required_text("status")),
        payload=payload,
        deadline_at=item.time("deadline_at"),
        lease_losses=item.number("lease_losses") or 0,
        wake_at=item.time("wake_at"),
        line_at=item.time("line_at"),
        publishes=item.number("publishes") or 0,
        failures=item.number("failures") or 0,
        waiting=Wait.from_json(json.loads(waiting)) if waiting else None,
        wait_results=item.json_map("wait_results"),
        steps=item.json_map("steps"),
        watched=bool(item.number("watched")),
        opened_groups=bool(item.number("opened_groups")),
        source_run_id=item.text("source_run_id"),
        source_kind=item.text("source_kind"),
        schedule_id=item.text("schedule_id"),
        scheduled_for=item.time("scheduled_for"),
        concurrency_key=item.text("concurrency_key"),
        slots=_slots(item.text("slots")),
        slot_wait=item.text("slot_wait"),
        rate_start=item.time("rate_start"),
        ordering_key=item.text("ordering_key"),
        place=item.number("place"),
        turn_wait=bool(item.number("turn_wait")),
        trace=item.text("trace"),
        app_version=item.text("app_version"),
        group_id=item.text("group_id"),
        group_index=item.number("group_index"),
        joined_group=item.text("joined_group"),
        debounce_key=item.text("debounce_key"),
        batch_key=item.text("batch_key"),
        retention=_seconds(item.number("retention")),
        collapsed=item.number("collapsed") or 0,
        progress=_progress(item.text("progress")),
        state=_state(item.text("state")),
        parked_from=RunStatus(parked_from) if parked_from else None,
        parked_reason=item.text("parked_reason"),
        created_at=item.required_time("created_at"),
        updated_at=item.required_time("updated_at"),
        seq=item.number("seq") or 0,
        attempt=item.number("attempt") or 0,
        due_at=item.time("due_at"),
        lease=lease,
        result=result,
        failure=Failure.from_json(json.loads(failure)) if failure else None,
        idempotency_key=item.text("idempotency_key"),
        singleton_key=item.text("singleton_key"),
        tags=item.text_map("tags"),
    )
    return _with_review(run, item.time("agenda_at"))


TERMINAL_VALUES = frozenset(status.value for status in TERMINAL_STATUSES)


def run_in(response: dict[str, Any]) -> Run | None:
    """The run a ``GetItem`` response carries, if any."""
    wire = response.get("Item")
    return run_from_wire(wire) if wire else None


def applied(transition: Transition, response: dict[str, Any]) -> Run:
    """The stored run after a transition's ``UpdateItem``."""
    stored = response.get("Attributes")
    return run_from_wire(stored) if stored else transition.after


def _seconds(number: int | None) -> timedelta | None:
    return timedelta(seconds=number) if number is not None else None


def expiry_of(run: Run) -> int | None:
    """When DynamoDB's TTL may delete ``run`` (epoch seconds): its retention after it
    finished. ``None`` while it is unfinished, when it is kept until pruned, when it
    opened a group or references objects of the payload bucket (``runs prune`` deletes
    its groups and takes the references off; a TTL deletion could do neither)."""
    if run.retention is None or run.opened_groups or run.status.value not in TERMINAL_VALUES:
        return None
    values = (run.payload, run.result, *run.steps.values(), *run.wait_results.values())
    if any(isinstance(v, Sealed) and v.reference is not None for v in values):
        return None
    return to_ms(run.updated_at + run.retention) // 1000


def _progress(text: str | None) -> Progress | None:
    return progress_from_text(text) if text is not None else None


def _state(text: str | None) -> Any:
    return state_from_text(text) if text is not None else None


def _slots(text: str | None) -> tuple[Slot, ...]:
    if not text:
        return ()
    return tuple(Slot(scope=str(scope), limit=int(limit)) for scope, limit in json.loads(text))


def _with_review(run: Run, listed: datetime | None) -> Run:
    """A run listed earlier than its agenda time carries that time as ``review_at``."""
    if listed is None:
        return run
    entry = agenda_entry(run)
    if entry is None or listed >= entry[1]:
        return run
    return run.with_changes(review_at=listed)


def events_from_item(item: RunItem) -> list[RunEvent]:
    return [event_from_map(stored) for stored in item.events or []]


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
        if value != old[name] or name in INDEX_ATTRIBUTES or name in transition.rewrites:
            x.set(name, value)
    for name, added in map_additions(before, after).items():
        for key, text in added.items():
            x.set((name, key), text)
    if transition.events:
        x.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in transition.events])
    x.require(x.compare("seq", "=", before.seq))
    if new["expires_at"] is not None and new["expires_at"] != old["expires_at"]:
        # a run that opened a group since it was read carries no expiry: decided again
        x.require(x.absent("opened_groups"))
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
    return _update_returning_run(x, table, environment, collapse.run_id)


def _update_returning_run(x: Expressions, table: str, environment: str, run_id: str) -> Request:
    """The ``UpdateItem`` of a run that returns the stored run, or the run that refused
    it."""
    return x.request(
        {
            "TableName": table,
            "Key": keys.run_key(environment, run_id),
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
    return _update_returning_run(x, table, environment, append.run_id)


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
    return _update_returning_run(x, table, environment, fill.run_id)


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
    return _under_lease(x, table, run, lease.token)


def progress_report(table: str, run: Run, token: str, report: AttemptReport) -> Request:
    """Write what an attempt reported about itself (no event, ``seq`` unchanged); refused
    once the token is no longer current, as a heartbeat is."""
    new = run_state_attributes(report.applied(run))
    x = Expressions(RunItem)
    for name in report.attributes():
        x.set(name, new[name])
    return _under_lease(x, table, run, token)


def _under_lease(x: Expressions, table: str, run: Run, token: str) -> Request:
    """The update ``x`` of a run's item, applied only while ``token`` holds its lease (a
    leased status): the fence of every write an attempt makes beside its transitions."""
    x.require(
        x.compare("lease_token", "=", token),
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
    x = _listing("status_pk", partition, after_sk, below_sk, task, queue)
    return x.request(
        {"TableName": table, "IndexName": STATUS_INDEX, "ScanIndexForward": False, "Limit": limit}
    )


def _listing(
    key: str,
    partition: str,
    after_sk: str | None,
    below_sk: str | None,
    task: str | None,
    queue: str | None,
) -> Expressions:
    """A listing index's query of one partition: its creation window on ``created_sk``,
    and task and queue as filters (attributes every listing index carries)."""
    x = Expressions()
    x.key(x.compare(key, "=", partition))
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
    return x


def query_tagged(
    table: str,
    slot: int,
    partition: str,
    *,
    after_sk: str | None,
    below_sk: str | None,
    task: str | None,
    queue: str | None,
    tags: Sequence[tuple[str, str]],
    limit: int,
) -> Request:
    """Runs of one partition of the ``slot``-th tag index, newest first, in the creation
    window :func:`query_status` takes, filtered by task, queue and further ``tags`` (every
    one held: attributes the index carries)."""
    x = _listing(TAG_KEY_ATTRIBUTES[slot], partition, after_sk, below_sk, task, queue)
    for key, value in tags:
        x.filter(x.compare(("tags", key), "=", value))
    return x.request(
        {
            "TableName": table,
            "IndexName": TAG_INDEXES[slot],
            "ScanIndexForward": False,
            "Limit": limit,
        }
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


@dataclass(frozen=True, slots=True)
class Beside:
    """The items beside the run's own that a transition writes, in one transaction with
    the run's update (:func:`~.slots.transaction`)."""

    taken: tuple[Slot, ...]
    """Concurrency slots a claim takes."""
    freed: tuple[Slot, ...]
    """Concurrency slots the attempt whose lease ends frees."""
    ordering_key: str | None
    """The ordering key whose line a finished ordered run leaves."""
    holds: Counter[Reference]
    """References to objects of the payload bucket that the write adds."""


def beside_the_run(transition: Transition) -> Beside | None:
    """What ``transition`` writes beside the run's own item; ``None``: nothing (a plain
    run's every write), so the write is one ``UpdateItem``. Only a run that holds or takes
    slots can take or free one, and only an ordered run can leave a line: the other
    tests are not made for it."""
    before, after = transition.before, transition.after
    taken = slots_taken(transition) if after.slots else ()
    freed = slots_freed(transition) if before.slots else ()
    ordering_key = turn_passed(transition) if after.ordering_key is not None else None
    holds = added_references(before, after)
    if not taken and not freed and ordering_key is None and not holds:
        return None
    return Beside(taken, freed, ordering_key, holds)
