"""The DynamoDB store's slot transactions, against a client that answers as DynamoDB
does: the shape of the ``TransactWriteItems`` a claim and an outcome send, and how each
cancellation is read (a full scope, a changed run, our own resent write, a conflicting
transaction on the same slot record, sent again after a wait)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from runlane_sqs import ConflictError, StorageUnavailable
from runlane_sqs.adapters.dynamodb.runs import beside_the_run, run_to_wire
from runlane_sqs.adapters.dynamodb.slots import TRANSACTION_ATTEMPTS, transaction
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.core import machine
from runlane_sqs.core.errors import NoFreeSlot
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run, Slot
from runlane_sqs.core.slots import slot_holder

TABLE = "runlane"
NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
SLOT = Slot("queue#billing", 2)
KEY = Slot("key#invoices.sync#acme", 1)


def queued() -> Run:
    run, _ = machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="test",
        task="billing.sync",
        queue="billing",
        payload={"n": 1},
        now=NOW,
    )
    return run.with_changes(created=False)


def claim(run: Run, token: str = "tok-1", slots: tuple[Slot, ...] = (SLOT,)) -> Transition:
    decision = machine.claim_lease(
        run,
        now=NOW + timedelta(seconds=1),
        owner="w1",
        token=token,
        duration=timedelta(seconds=60),
        slots=slots,
    )
    assert isinstance(decision, Transition)
    return decision


def success(claimed: Run) -> Transition:
    assert claimed.lease is not None
    return machine.record_success(
        claimed, token=claimed.lease.token, result=None, now=NOW + timedelta(seconds=2)
    )


def cancelled(*reasons: dict[str, Any]) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": list(reasons),
        },
        "TransactWriteItems",
    )


NONE = {"Code": "None"}


class Client:
    """Answers each ``TransactWriteItems`` with the next of ``answers`` (an error to
    raise, or a response)."""

    def __init__(self, *answers: Exception | dict[str, Any]) -> None:
        self.answers = list(answers)
        self.sent: list[dict[str, Any]] = []

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def store_with(client: Client) -> tuple[DynamoRunStore, list[float]]:
    store = DynamoRunStore(client, TABLE, "test")
    waits: list[float] = []
    store.sleep = waits.append  # type: ignore[method-assign]
    return store, waits


def spelled(request: dict[str, Any], field: str) -> str:
    """``request[field]`` with its placeholders replaced by the names and values they
    stand for (a number as digits, text quoted, a set as a list)."""
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues", {})

    def value(placeholder: str) -> str:
        ((kind, wire),) = values[placeholder].items()
        return str(wire) if kind == "N" else repr(wire)

    text = re.sub(r"#\w+", lambda m: names[m.group()], request[field])
    return re.sub(r":\w+", lambda m: value(m.group()), text)


def test_a_claim_writes_the_run_and_adds_its_holder_under_the_limit() -> None:
    decision = claim(queued(), slots=(SLOT, KEY))
    beside = beside_the_run(decision)
    assert beside is not None and beside.taken == (SLOT, KEY)
    request = transaction(TABLE, decision, beside)
    run, *takes = (item["Update"] for item in request["TransactItems"])
    assert "ReturnValues" not in run  # a transaction returns nothing
    assert spelled(run, "ConditionExpression").endswith("AND attribute_not_exists(watched)")
    assert [t["Key"]["pk"]["S"] for t in takes] == [
        "SLOT#test#queue#billing",
        "SLOT#test#key#invoices.sync#acme",
    ]
    holder = slot_holder("tok-1", decision.run_id)
    for take, slot in zip(takes, (SLOT, KEY), strict=True):
        assert f"ADD holders {[holder]}" in spelled(take, "UpdateExpression")
        assert spelled(take, "ConditionExpression") == (
            f"attribute_not_exists(holders) OR size(holders) < {slot.limit}"
        )


def test_an_outcome_deletes_its_holder_fenced_by_the_runs_own_condition() -> None:
    claimed = claim(queued()).after
    outcome = success(claimed)
    beside = beside_the_run(outcome)
    assert beside is not None and beside.freed == claimed.slots
    request = transaction(TABLE, outcome, beside)
    run, free = (item["Update"] for item in request["TransactItems"])
    assert "lease_token" in run["ExpressionAttributeNames"].values()
    assert f"DELETE holders {[slot_holder('tok-1', claimed.id)]}" in spelled(
        free, "UpdateExpression"
    )
    assert "ConditionExpression" not in free


def test_writes_of_runs_without_slots_stay_single_updates() -> None:
    plain = claim(queued(), slots=())
    assert beside_the_run(plain) is None
    assert beside_the_run(success(plain.after)) is None


def test_a_full_scope_is_no_free_slot_and_nothing_is_written() -> None:
    held = {"holders": {"SS": ["a:1", "b:2"]}}
    store, _ = store_with(Client(cancelled(NONE, {"Code": "ConditionalCheckFailed", "Item": held})))
    with pytest.raises(NoFreeSlot) as full:
        store.apply(claim(queued()))
    assert (full.value.scope, full.value.holders, full.value.limit) == (SLOT.scope, 2, 2)


def test_a_changed_run_is_a_conflict_carrying_the_stored_run() -> None:
    run = queued()
    theirs = claim(run, token="tok-2").after
    stored = {"Code": "ConditionalCheckFailed", "Item": run_to_wire(theirs, [], "{}")}
    store, _ = store_with(Client(cancelled(stored, NONE)))
    with pytest.raises(ConflictError) as conflict:
        store.apply(claim(run))
    assert conflict.value.current is not None
    assert conflict.value.current.lease == theirs.lease


def test_a_resent_transaction_that_had_landed_returns_the_stored_run() -> None:
    ours = claim(queued())
    first = machine.new_run(
        run_id=ours.run_id,
        environment="test",
        task="billing.sync",
        queue="billing",
        payload={"n": 1},
        now=NOW,
    )[1]
    stored = run_to_wire(ours.after, [first, *ours.events], '{"n":1}')
    reasons = cancelled({"Code": "ConditionalCheckFailed", "Item": stored}, NONE)
    store, _ = store_with(Client(reasons))
    landed = store.apply(ours)
    assert landed.lease == ours.after.lease and landed.slots == (SLOT,)


def test_a_conflicting_transaction_is_sent_again_after_a_growing_wait() -> None:
    conflict = cancelled(NONE, {"Code": "TransactionConflict"})
    client = Client(conflict, conflict, {})
    store, waits = store_with(client)
    ours = claim(queued())
    assert store.apply(ours) == ours.after
    assert len(client.sent) == 3 and client.sent[0] == client.sent[2]
    assert len(waits) == 2 and waits[1] > 0


def test_a_transaction_that_always_conflicts_is_unavailable_not_lost() -> None:
    conflict = cancelled(NONE, {"Code": "TransactionConflict"})
    store, waits = store_with(Client(*[conflict] * TRANSACTION_ATTEMPTS))
    with pytest.raises(StorageUnavailable, match="conflicting transactions"):
        store.apply(claim(queued()))
    assert len(waits) == TRANSACTION_ATTEMPTS - 1
