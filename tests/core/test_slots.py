"""The pure decisions of concurrency limits: which writes take and free slots, how a run
waits for one and is woken, and how runs are stored with them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.adapters.dynamodb.runs import run_from_wire, run_state_attributes, run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.errors import ConfigurationError, InvalidKeyError
from runlane_sqs.core.machine import (
    HintedClaim,
    RepublishPolicy,
    Skip,
    SkipReason,
    Transition,
    agenda_entry,
    withdraw_claim,
)
from runlane_sqs.core.model import EventType, Run, RunStatus, Slot
from runlane_sqs.core.recovery import RecoverySettings, recover_lease
from runlane_sqs.core.slots import (
    SlotState,
    check_concurrency_key,
    check_limit,
    holder_run,
    key_scope,
    queue_scope,
    slot_freed,
    slot_holder,
    slots_freed,
    slots_taken,
    wait_for_slot,
)
from runlane_sqs.core.wakeup import ClaimHint
from runlane_sqs.engine.tasks import TaskRegistry

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=60)
SLOT = Slot(queue_scope("billing"), 2)
REPUBLISH = RepublishPolicy()


def queued(**changes: object) -> Run:
    run, _ = machine.new_run(
        run_id="0123456789abcdef0123456789abcdef",
        environment="prod",
        task="billing.sync",
        queue="billing",
        payload={"customer": "acme"},
        now=NOW,
    )
    return run.with_changes(created=False, **changes)


def claimed(run: Run | None = None, token: str = "tok-1") -> Transition:
    decision = machine.claim_lease(
        run or queued(), now=NOW, owner="w1", token=token, duration=LEASE, slots=(SLOT,)
    )
    assert isinstance(decision, Transition)
    return decision


def test_a_claim_takes_its_slots_and_the_attempts_end_frees_them() -> None:
    claim = claimed()
    assert slots_taken(claim) == (SLOT,) and slots_freed(claim) == ()
    assert claim.after.slots == (SLOT,)
    done = machine.record_success(claim.after, token="tok-1", result=1, now=NOW)
    assert slots_freed(done) == (SLOT,) and slots_taken(done) == ()
    assert done.after.slots == ()


def test_writes_that_keep_the_lease_take_and_free_nothing() -> None:
    running = claimed().after
    cancel = machine.request_cancel(running, now=NOW, actor="op", reason="stop")
    assert cancel.after.lease == running.lease
    assert (slots_taken(cancel), slots_freed(cancel)) == ((), ())
    assert cancel.after.slots == (SLOT,)


def test_every_way_an_attempt_ends_frees_its_slots() -> None:
    running = claimed().after
    later = NOW + LEASE + timedelta(seconds=1)
    recovered = recover_lease(running, now=later, retry=None, settings=RecoverySettings())
    assert isinstance(recovered, Transition)
    withdrawn = withdraw_claim(running, token="tok-1", now=NOW)
    for ended in (recovered, withdrawn):
        assert slots_freed(ended) == (SLOT,)
        assert ended.after.slots == () and ended.after.lease is None


def test_a_run_waits_for_a_slot_without_an_attempt_and_off_the_agenda() -> None:
    run = queued()
    waiting = wait_for_slot(run, SLOT, holders=2, now=NOW).after
    assert (waiting.status, waiting.attempt, waiting.failures) == (RunStatus.QUEUED, 0, 0)
    assert waiting.slot_wait == SLOT.scope and waiting.due_at is None
    assert agenda_entry(waiting) is None
    event = wait_for_slot(run, SLOT, holders=2, now=NOW).events[0]
    assert event.type is EventType.WAITING_FOR_SLOT
    assert event.data == {"scope": SLOT.scope, "limit": 2, "holders": 2}
    skip = machine.claim_lease(waiting, now=NOW, owner="w2", token="t", duration=LEASE)
    assert skip == Skip(SkipReason.WAITING_FOR_SLOT)


def test_a_woken_run_is_due_at_once_and_listed_for_a_republish() -> None:
    waiting = wait_for_slot(queued(), SLOT, holders=2, now=NOW).after
    later = NOW + timedelta(seconds=5)
    woken = slot_freed(waiting, now=later, republish=REPUBLISH)
    assert woken is not None
    assert woken.after.slot_wait is None and woken.after.due_at == later
    assert woken.after.wake_at == later + REPUBLISH.after
    assert woken.events[0].type is EventType.SLOT_FREED
    assert slot_freed(woken.after, now=later, republish=REPUBLISH) is None  # woken once


def test_a_hinted_claim_never_takes_a_run_that_waits_for_a_slot() -> None:
    waiting = wait_for_slot(queued(), SLOT, holders=2, now=NOW).after
    hint = ClaimHint(seq=waiting.seq, attempt=0, task=waiting.task)
    claim = HintedClaim("prod", waiting.id, "billing", hint, "w", "t", NOW, LEASE)
    assert not claim.holds(waiting.with_changes(due_at=NOW))


def test_runs_are_stored_with_their_key_slots_and_slot_wait() -> None:
    run = queued(concurrency_key="acme")
    running = claimed(run).after
    assert run_from_wire(run_to_wire(running, [], "{}")).slots == (SLOT,)
    assert run_from_wire(run_to_wire(running, [], "{}")).concurrency_key == "acme"
    waiting = wait_for_slot(run, SLOT, holders=2, now=NOW).after
    state = run_state_attributes(waiting)
    assert state["slot_wait"] == SLOT.scope
    assert state["wait_pk"] == "prod#slot#queue#billing"
    assert state["wait_sk"] == f"{int(NOW.timestamp() * 1000):013d}#{run.id}"  # oldest first
    assert run_from_wire(run_to_wire(waiting, [], "{}")).slot_wait == SLOT.scope
    cancelled = machine.request_cancel(waiting, now=NOW, actor="op", reason="").after
    assert run_state_attributes(cancelled)["wait_pk"] is None
    assert run_state_attributes(cancelled)["slot_wait"] is None


def test_holders_name_the_lease_token_and_the_run() -> None:
    holder = slot_holder("tok", "0123")
    assert holder_run(holder) == ("tok", "0123")
    state = SlotState(SLOT.scope, 2, frozenset({holder}))
    assert state.free == 1
    assert SlotState(SLOT.scope, 1, frozenset({holder, "b:2"})).free == 0  # limit lowered


@pytest.mark.parametrize("limit", [0, -3, 10_001, 2.0, "2", None, True])
def test_limits_are_whole_numbers_from_one(limit: object) -> None:
    with pytest.raises(ConfigurationError, match="limit"):
        check_limit(limit, "limit")


def test_concurrency_keys_are_checked_like_other_keys() -> None:
    assert check_concurrency_key("cafe\u0301") == "caf\u00e9"  # stored in NFC
    for bad, message in [("", "empty"), ("x" * 201, "201"), ("a\u202eb", "U\\+202E")]:
        with pytest.raises(InvalidKeyError, match=message):
            check_concurrency_key(bad)


def test_a_registry_gives_each_run_the_slots_its_limits_ask_for() -> None:
    tasks = TaskRegistry()
    tasks.define_queue("billing", 2)
    task = tasks.register(
        lambda ctx, p: p,
        name="billing.sync",
        queue="billing",
        retry=None,
        timeout=None,
        concurrency_key=lambda p: p["customer"],
        key_limit=1,
    )
    plain = tasks.register(lambda c, p: p, name="plain", queue="default", retry=None, timeout=None)
    assert tasks.slots_for(queued(concurrency_key="acme")) == (
        SLOT,
        Slot(key_scope("billing.sync", "acme"), 1),
    )
    assert tasks.slots_for(queued()) == (SLOT,)  # no key: the queue's limit only
    assert tasks.limited(task, "billing") and not tasks.limited(plain, "default")
    assert tasks.slots_for(queued().with_changes(queue="default", task="plain")) == ()
