"""The port contracts, one suite for every adapter (CONTRIBUTING.md, "Adding an adapter").

Each test body runs twice: against the in-memory store and transport that
:mod:`runlane_sqs.testing` ships for users' tests, and against the DynamoDB store and
SQS transport talking HTTP to the moto server. A difference between the two is a bug
in one of them: users' unit tests would pass on behaviour production does not have.

Store time comes from a :class:`ManualClock` in both cases. SQS visibility runs on the
moto server's real clock, so the SQS queue used here has a one-second visibility
timeout and :meth:`Backend.wait` sleeps for it; the in-memory transport moves the
manual clock instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest

from runlane_sqs import ConflictError, EventType, Lease, LeaseLost, Run, RunStatus
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, agenda_pk
from runlane_sqs.core import machine
from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.limits import MAX_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.machine import RepublishPolicy, Transition, listed_at
from runlane_sqs.core.model import JSON, KeyKind, RunEvent, new_lease_token, new_run_id
from runlane_sqs.core.recovery import QueueLine, plan_publish
from runlane_sqs.core.values import encode_json
from runlane_sqs.core.wakeup import Wakeup, parse_wakeup
from runlane_sqs.ports.keys import KeyClaim, KeyConflict
from runlane_sqs.ports.transport import ReceivedWakeup
from tests.contract.store_backends import (
    LEASE,
    QUEUE,
    REVISIBILITY_POLLS,
    VISIBILITY_MARGIN_SECONDS,
    Backend,
)

TASK = "contract.task"
OTHER_TASK = "contract.other"


# --- helpers ---------------------------------------------------------------------------


def _payload_text(payload: JSON) -> str:
    return encode_json(payload, what="payload", limit_bytes=MAX_PAYLOAD_LIMIT_BYTES)


def _new(
    backend: Backend,
    *,
    run_id: str | None = None,
    task: str = TASK,
    payload: JSON = None,
    due_in: float | None = None,
) -> tuple[Run, RunEvent]:
    now = backend.clock.now()
    return machine.new_run(
        run_id=run_id or new_run_id(),
        environment=backend.environment,
        task=task,
        queue=QUEUE,
        payload=payload,
        now=now,
        due_at=now + timedelta(seconds=due_in) if due_in is not None else None,
    )


def _create(
    backend: Backend,
    *,
    run_id: str | None = None,
    task: str = TASK,
    payload: JSON = None,
    due_in: float | None = None,
    claims: Sequence[KeyClaim] = (),
) -> Run:
    """Store a new run (as a trigger would) and return it as stored."""
    run, event = _new(backend, run_id=run_id, task=task, payload=payload, due_in=due_in)
    backend.store.create_run(run, event, _payload_text(payload), claims)
    return replace(run, created=False)


def _claim(backend: Backend, run: Run, owner: str = "worker-a") -> Run:
    decision = machine.claim_lease(
        run, now=backend.clock.now(), owner=owner, token=new_lease_token(), duration=LEASE
    )
    assert isinstance(decision, Transition), decision
    return backend.store.apply(decision)


def _token(run: Run) -> str:
    assert run.lease is not None
    return run.lease.token


def _refused_claim(backend: Backend, claims: Sequence[KeyClaim]) -> KeyConflict:
    """Try to create a run with ``claims``; it must be refused and store nothing."""
    run, event = _new(backend)
    with pytest.raises(KeyConflict) as caught:
        backend.store.create_run(run, event, "null", claims)
    assert backend.store.get_run(run.id) is None
    return caught.value


def _in_shard(shard: int) -> str:
    """A run id listed in agenda shard ``shard`` (the shard is its first four hex digits)."""
    return f"{shard:04x}{new_run_id()[4:]}"


def _receive(backend: Backend) -> list[ReceivedWakeup]:
    return backend.transport.receive(QUEUE, 10, 0)


def _wakeup(backend: Backend) -> Wakeup:
    return Wakeup(
        environment=backend.environment,
        run_id=new_run_id(),
        queue=QUEUE,
        requested_at=backend.clock.now(),
    )


# --- RunStore: create and read ---------------------------------------------------------


def test_create_run_then_get_run_gives_back_json_payload_and_millisecond_times(
    backend: Backend,
) -> None:
    backend.clock.advance(timedelta(microseconds=123_456))
    now = backend.clock.now()
    payload = {"to": "a@example.com", "items": (1, 2.5, "x"), "none": None, "text": "é✓"}
    run, event = _new(backend, payload=payload, due_in=5)
    # a caller's run with times finer than storage keeps
    due = now + timedelta(seconds=5, microseconds=789)
    run = replace(run, created_at=now, updated_at=now, due_at=due, idempotency_key="order-1")
    event = replace(event, at=now)
    assert truncate_ms(now) != now

    backend.store.create_run(run, event, _payload_text(payload))

    stored = backend.store.get_run(run.id)
    assert stored == replace(
        run,
        created=False,
        payload={"to": "a@example.com", "items": [1, 2.5, "x"], "none": None, "text": "é✓"},
        created_at=truncate_ms(now),
        updated_at=truncate_ms(now),
        due_at=truncate_ms(due),
    )
    assert backend.store.get_events(run.id) == [replace(event, at=truncate_ms(now))]
    assert backend.store.get_history(run.id) == (stored, backend.store.get_events(run.id))


def test_create_run_with_a_stored_id_is_refused_and_keeps_the_stored_run(
    backend: Backend,
) -> None:
    stored = _create(backend, payload={"n": 1})
    again, event = _new(backend, run_id=stored.id, payload={"n": 2})

    with pytest.raises(ConflictError) as caught:
        backend.store.create_run(again, event, _payload_text({"n": 2}))

    assert caught.value.current == stored
    assert backend.store.get_run(stored.id) == stored
    assert len(backend.store.get_events(stored.id)) == 1


def test_an_unknown_run_has_no_record_and_no_history(backend: Backend) -> None:
    _create(backend)
    assert backend.store.get_run(new_run_id()) is None
    assert backend.store.get_events(new_run_id()) == []
    assert backend.store.get_history(new_run_id()) is None


def test_get_events_lists_the_history_in_order_without_gaps(backend: Backend) -> None:
    run = _create(backend, payload={"n": 1})
    backend.clock.advance(1)
    claimed = _claim(backend, run)
    backend.clock.advance(1)
    asked = backend.store.apply(
        machine.request_cancel(claimed, now=backend.clock.now(), actor="alice", reason="stop")
    )
    backend.clock.advance(1)
    done = backend.store.apply(
        machine.record_success(
            asked, token=_token(claimed), result={"ok": 1}, now=backend.clock.now()
        )
    )

    events = backend.store.get_events(run.id)
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.type for e in events] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.CANCEL_REQUESTED,
        EventType.CANCELLED,
    ]
    assert [e.at - run.created_at for e in events] == [timedelta(seconds=s) for s in range(4)]
    assert events[1].data == {"worker": "worker-a"}
    assert events[2].data == {"actor": "alice", "reason": "stop"}
    assert events[3].data == {"after": "succeeded"}
    assert (done.status, done.seq) == (RunStatus.CANCELLED, 4)
    assert backend.store.get_run(run.id) == done


# --- RunStore: conditional writes ------------------------------------------------------


def test_apply_writes_a_claim_and_returns_the_run_as_stored(backend: Backend) -> None:
    run = _create(backend, payload={"n": 1})
    token = new_lease_token()
    now = backend.clock.now()
    decision = machine.claim_lease(run, now=now, owner="worker-a", token=token, duration=LEASE)
    assert isinstance(decision, Transition)

    claimed = backend.store.apply(decision)

    assert (claimed.status, claimed.attempt, claimed.seq) == (RunStatus.RUNNING, 1, 2)
    assert claimed.lease == Lease("worker-a", token, truncate_ms(now + LEASE))
    assert claimed.due_at is None
    assert claimed.payload == {"n": 1}
    assert backend.store.get_run(run.id) == claimed


def test_apply_from_a_stale_sequence_is_refused_with_the_stored_run(backend: Backend) -> None:
    run = _create(backend)
    winner = _claim(backend, run, "worker-a")
    late = machine.claim_lease(
        run, now=backend.clock.now(), owner="worker-b", token=new_lease_token(), duration=LEASE
    )
    assert isinstance(late, Transition)

    with pytest.raises(ConflictError) as caught:
        backend.store.apply(late)

    assert caught.value.run_id == run.id
    assert caught.value.current is not None
    assert caught.value.current == winner
    assert _token(caught.value.current) == _token(winner)
    assert backend.store.get_run(run.id) == winner
    assert len(backend.store.get_events(run.id)) == 2


def test_apply_fenced_on_another_token_is_refused(backend: Backend) -> None:
    run = _create(backend)
    claimed = _claim(backend, run)
    success = machine.record_success(
        claimed, token=_token(claimed), result={"ok": True}, now=backend.clock.now()
    )
    forged = replace(success, fence=new_lease_token())

    with pytest.raises(ConflictError) as caught:
        backend.store.apply(forged)

    assert caught.value.current == claimed
    assert backend.store.get_run(run.id) == claimed
    assert [e.type for e in backend.store.get_events(run.id)] == [
        EventType.TRIGGERED,
        EventType.STARTED,
    ]


def test_apply_to_a_missing_run_is_refused_with_no_current_run(backend: Backend) -> None:
    _create(backend)
    never_stored, _ = _new(backend)
    decision = machine.claim_lease(
        never_stored,
        now=backend.clock.now(),
        owner="worker-a",
        token=new_lease_token(),
        duration=LEASE,
    )
    assert isinstance(decision, Transition)

    with pytest.raises(ConflictError) as caught:
        backend.store.apply(decision)

    assert caught.value.current is None
    assert backend.store.get_run(never_stored.id) is None


def test_a_guarded_write_applies_once_from_the_same_state(backend: Backend) -> None:
    run = _create(backend)
    backend.clock.advance(1)
    decision = plan_publish(run, now=backend.clock.now(), policy=RepublishPolicy())
    assert isinstance(decision, Transition)
    assert (decision.guard, decision.events) == (("publishes",), ())

    first = backend.store.apply(decision)
    with pytest.raises(ConflictError) as caught:
        backend.store.apply(decision)

    assert (first.seq, first.publishes) == (run.seq, 1)
    assert caught.value.current is not None
    assert caught.value.current.publishes == 1
    stored = backend.store.get_run(run.id)
    assert stored is not None
    assert (stored.publishes, stored.wake_at) == (1, decision.after.wake_at)
    assert len(backend.store.get_events(run.id)) == 1


def test_a_republish_held_in_line_keeps_the_wakeups_place_until_a_claim(
    backend: Backend,
) -> None:
    policy = RepublishPolicy()
    backend.clock.advance(1)
    published_at = truncate_ms(backend.clock.now())
    publish = plan_publish(_create(backend), now=published_at, policy=policy)
    assert isinstance(publish, Transition)
    run = backend.store.apply(publish)
    assert run.wake_at is not None
    backend.clock.advance(run.wake_at - backend.clock.now())
    held = plan_publish(run, now=backend.clock.now(), policy=policy, line=QueueLine())
    assert isinstance(held, Transition)

    stored = backend.store.apply(held)

    assert stored.line_at == published_at and stored.wake_at == held.after.wake_at
    assert backend.store.get_run(run.id) == stored
    claimed = machine.claim_lease(
        stored, now=backend.clock.now(), owner="w", token="t", duration=timedelta(seconds=60)
    )
    assert isinstance(claimed, Transition)
    assert backend.store.apply(claimed).line_at is None
    reread = backend.store.get_run(run.id)
    assert reread is not None and reread.line_at is None


def test_the_drained_times_of_queues_never_move_back(backend: Backend) -> None:
    store = backend.store
    assert store.progress.load_drained() == {}
    later, earlier = backend.clock.now(), backend.clock.now() - timedelta(minutes=1)
    store.progress.save_drained("default", later)
    store.progress.save_drained("default", earlier)  # an overlapping pass that counted first
    store.progress.save_drained("reports", earlier)
    assert store.progress.load_drained() == {"default": later, "reports": earlier}


# --- RunStore: leases ------------------------------------------------------------------


def test_renew_lease_extends_the_current_lease(backend: Backend) -> None:
    run = _create(backend)
    claimed = _claim(backend, run)
    assert claimed.lease is not None
    backend.clock.advance(10)
    lease = machine.renew_lease(
        claimed, token=_token(claimed), now=backend.clock.now(), duration=LEASE
    )

    renewed = backend.store.renew_lease(claimed, lease)

    assert renewed.lease == lease
    assert lease.expires_at == claimed.lease.expires_at + timedelta(seconds=10)
    stored = backend.store.get_run(run.id)
    assert stored is not None
    assert stored.lease == lease
    assert (stored.seq, stored.status) == (claimed.seq, RunStatus.RUNNING)
    assert len(backend.store.get_events(run.id)) == 2
    # the agenda entry stays where the claim put it, at the old expiry: maintenance looks
    # then, finds the lease alive and lists the run at the new one (no index write here)
    partition = agenda_pk(backend.environment, AgendaKind.RUN, run.id)
    at_old, _ = backend.store.agenda_page(partition, claimed.lease.expires_at, 10, None)
    assert [r.id for r in at_old] == [run.id]
    assert stored.review_at == claimed.lease.expires_at
    assert listed_at(stored) == claimed.lease.expires_at


def test_renew_lease_with_another_token_is_refused(backend: Backend) -> None:
    run = _create(backend)
    claimed = _claim(backend, run)
    backend.clock.advance(10)
    lease = machine.renew_lease(
        claimed, token=_token(claimed), now=backend.clock.now(), duration=LEASE
    )

    with pytest.raises(LeaseLost):
        backend.store.renew_lease(claimed, replace(lease, token=new_lease_token()))

    assert backend.store.get_run(run.id) == claimed


def test_renew_lease_after_the_run_finished_is_refused(backend: Backend) -> None:
    run = _create(backend)
    claimed = _claim(backend, run)
    done = backend.store.apply(
        machine.record_success(claimed, token=_token(claimed), result=1, now=backend.clock.now())
    )
    backend.clock.advance(10)
    lease = machine.renew_lease(
        claimed, token=_token(claimed), now=backend.clock.now(), duration=LEASE
    )

    with pytest.raises(LeaseLost):
        backend.store.renew_lease(claimed, lease)

    stored = backend.store.get_run(run.id)
    assert stored == done
    assert stored is not None
    assert (stored.status, stored.lease) == (RunStatus.SUCCEEDED, None)


# --- RunStore: keys --------------------------------------------------------------------


def test_a_held_key_refuses_another_claim_and_names_its_owner(backend: Backend) -> None:
    tomorrow = backend.clock.now() + timedelta(days=1)
    idempotency = KeyClaim(KeyKind.IDEMPOTENCY, TASK, "order-1", expires_at=tomorrow)
    singleton = KeyClaim(KeyKind.SINGLETON, TASK, "nightly")
    holder = _create(backend, claims=[idempotency, singleton])

    for claim in (idempotency, singleton):
        conflict = _refused_claim(backend, [claim])
        assert (conflict.claim, conflict.owner) == (claim, holder.id)

    # the same text is another key under another kind or another task
    _create(backend, claims=[KeyClaim(KeyKind.SINGLETON, TASK, "order-1")])
    _create(
        backend,
        task=OTHER_TASK,
        claims=[KeyClaim(KeyKind.IDEMPOTENCY, OTHER_TASK, "order-1", expires_at=tomorrow)],
    )


def test_a_refused_claim_takes_none_of_its_keys(backend: Backend) -> None:
    tomorrow = backend.clock.now() + timedelta(days=1)
    singleton = KeyClaim(KeyKind.SINGLETON, TASK, "nightly")
    fresh = KeyClaim(KeyKind.IDEMPOTENCY, TASK, "order-2", expires_at=tomorrow)
    holder = _create(backend, claims=[singleton])

    conflict = _refused_claim(backend, [fresh, singleton])

    assert (conflict.claim, conflict.owner) == (singleton, holder.id)
    taker = _create(backend, claims=[fresh])
    assert _refused_claim(backend, [fresh]).owner == taker.id


def test_a_claim_naming_the_previous_owner_takes_the_key_over(backend: Backend) -> None:
    singleton = KeyClaim(KeyKind.SINGLETON, TASK, "nightly")
    first = _create(backend, claims=[singleton])

    second = _create(backend, claims=[replace(singleton, previous_owner=first.id)])

    assert _refused_claim(backend, [singleton]).owner == second.id
    stale_takeover = replace(singleton, previous_owner=first.id)
    assert _refused_claim(backend, [stale_takeover]).owner == second.id


def test_release_key_frees_the_key_only_for_its_holder(backend: Backend) -> None:
    singleton = KeyClaim(KeyKind.SINGLETON, TASK, "nightly")
    first = _create(backend, claims=[singleton])

    backend.store.keys.release_key(KeyKind.SINGLETON, TASK, "nightly", new_run_id())
    assert _refused_claim(backend, [singleton]).owner == first.id

    backend.store.keys.release_key(KeyKind.SINGLETON, TASK, "nightly", first.id)
    second = _create(backend, claims=[singleton])

    backend.store.keys.release_key(KeyKind.SINGLETON, TASK, "nightly", first.id)
    assert _refused_claim(backend, [singleton]).owner == second.id
    backend.store.keys.release_key(KeyKind.IDEMPOTENCY, TASK, "never-claimed", first.id)


def test_an_expired_idempotency_key_can_be_claimed_again(backend: Backend) -> None:
    in_an_hour = backend.clock.now() + timedelta(hours=1)
    claim = KeyClaim(KeyKind.IDEMPOTENCY, TASK, "order-3", expires_at=in_an_hour)
    first = _create(backend, claims=[claim])
    backend.clock.advance(timedelta(minutes=59))
    assert _refused_claim(backend, [claim]).owner == first.id

    backend.clock.advance(timedelta(minutes=2))
    renewed = replace(claim, expires_at=backend.clock.now() + timedelta(hours=1))
    second = _create(backend, claims=[renewed])

    assert _refused_claim(backend, [renewed]).owner == second.id


# --- RunStore: agenda and cursors ------------------------------------------------------


def test_agenda_page_lists_due_runs_of_one_partition_in_time_order_page_by_page(
    backend: Backend,
) -> None:
    store = backend.store
    now = backend.clock.now()
    until = now + timedelta(seconds=10)
    offsets = [5, 1, 10, 3, 3, 2, 6]  # two share a time; one is due exactly at ``until``
    listed = [_create(backend, run_id=_in_shard(0), due_in=s) for s in offsets]
    _create(backend, run_id=_in_shard(0), due_in=11)  # after ``until``
    _create(backend, run_id=_in_shard(1), due_in=1)  # another partition
    cancelled = _create(backend, run_id=_in_shard(0), due_in=2)
    store.apply(machine.request_cancel(cancelled, now=now, actor="alice", reason="no"))
    _claim(backend, _create(backend, run_id=_in_shard(0)))  # now on the lease partition
    partition = agenda_pk(backend.environment, AgendaKind.RUN, listed[0].id)

    pages: list[list[Run]] = []
    cursor: str | None = None
    while True:
        page, cursor = store.agenda_page(partition, until, 3, cursor)
        pages.append(page)
        if cursor is None or len(pages) > len(offsets):
            break

    assert [len(p) for p in pages] == [3, 3, 1]
    seen = [run for page in pages for run in page]
    assert len({run.id for run in seen}) == len(seen)
    assert {run.id for run in seen} == {run.id for run in listed}
    assert [run.due_at for run in seen] == [now + timedelta(seconds=s) for s in sorted(offsets)]
    assert {run.status for run in seen} == {RunStatus.QUEUED}


def test_a_finished_run_leaves_the_agenda(backend: Backend) -> None:
    run = _create(backend, run_id=_in_shard(2))
    claimed = _claim(backend, run)
    assert claimed.lease is not None
    partition = agenda_pk(backend.environment, AgendaKind.RUN, run.id)
    until = claimed.lease.expires_at
    assert [r.id for r in backend.store.agenda_page(partition, until, 10, None)[0]] == [run.id]

    backend.store.apply(
        machine.record_success(claimed, token=_token(claimed), result=None, now=until)
    )

    far = until + timedelta(days=365)
    for kind in AgendaKind:
        for shard in agenda_partitions(backend.environment, kind):
            assert backend.store.agenda_page(shard, far, 10, None) == ([], None)


def test_cursors_round_trip_and_saving_none_forgets(backend: Backend) -> None:
    store = backend.store
    due, lease = (f"{backend.environment}#{kind}#0" for kind in ("due", "lease"))
    assert store.progress.load_cursors() == {}

    store.progress.save_cursor(due, "cursor-1")
    store.progress.save_cursor(lease, "cursor-2")
    assert store.progress.load_cursors() == {due: "cursor-1", lease: "cursor-2"}

    store.progress.save_cursor(due, "cursor-3")
    store.progress.save_cursor(lease, None)
    store.progress.save_cursor(f"{backend.environment}#run#3", None)
    assert store.progress.load_cursors() == {due: "cursor-3"}


# --- WakeupTransport -------------------------------------------------------------------


def test_published_wakeups_are_received_and_ack_removes_them(backend: Backend) -> None:
    wakeups = [_wakeup(backend) for _ in range(3)]
    assert backend.transport.publish(wakeups) == []

    received = _receive(backend)

    by_run = {parse_wakeup(m.body).run_id: parse_wakeup(m.body) for m in received}
    assert by_run == {w.run_id: w for w in wakeups}
    assert {(m.queue, m.receive_count) for m in received} == {(QUEUE, 1)}
    backend.transport.ack(received)
    backend.transport.release(received)  # an acked message cannot be made visible again
    assert _receive(backend) == []


def test_release_makes_a_received_wakeup_visible_again_at_once(backend: Backend) -> None:
    wakeup = _wakeup(backend)
    backend.transport.publish([wakeup])
    [first] = _receive(backend)
    assert _receive(backend) == []

    backend.transport.release([first])

    [again] = _receive(backend)
    assert (again.message_id, again.body, again.receive_count) == (
        first.message_id,
        first.body,
        2,
    )
    assert again.receipt != first.receipt
    backend.transport.ack([again])


def test_an_unacked_wakeup_stays_hidden_until_the_visibility_timeout(backend: Backend) -> None:
    wakeup = _wakeup(backend)
    backend.transport.publish([wakeup])
    [first] = _receive(backend)
    assert _receive(backend) == []

    backend.wait(backend.visibility_timeout / 2)
    assert _receive(backend) == []

    # SQS promises no exact moment; LocalStack re-shows messages on a one-second timer
    backend.wait(backend.visibility_timeout / 2 + VISIBILITY_MARGIN_SECONDS)
    received = _receive(backend)
    for _ in range(REVISIBILITY_POLLS):
        if received:
            break
        backend.wait(VISIBILITY_MARGIN_SECONDS)
        received = _receive(backend)
    [again] = received
    assert (again.message_id, parse_wakeup(again.body)) == (first.message_id, wakeup)
    assert again.receive_count == 2
    backend.transport.ack([again])
