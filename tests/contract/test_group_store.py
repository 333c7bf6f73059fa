"""The group store's contract, on the in-memory store and on DynamoDB over HTTP: a
group opens once (fenced on its parent's lease), ``started`` moves only from the value
read, the join and the stop are recorded once, the agenda lists unjoined groups with
cursors, and a child is counted by the write that makes it terminal, once."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

from runlane_sqs import ConflictError, LeaseLost
from runlane_sqs.core import machine
from runlane_sqs.core.errors import InvalidCursor
from runlane_sqs.core.groups import Group, Item, child_run_id, chunk
from runlane_sqs.core.indexes import AgendaKind, agenda_partitions
from runlane_sqs.core.model import new_lease_token, new_run_id
from tests.contract.store_backends import LEASE, QUEUE, Backend

TASK = "contract.task"


def _group(backend: Backend, total: int = 3, **changes: object) -> tuple[Group, list[list[Item]]]:
    items = [Item(TASK, f'{{"n":{n}}}') for n in range(total)]
    bounds, chunks = chunk(items)
    group = Group(
        id=new_run_id(),
        environment=backend.environment,
        total=total,
        window=2,
        tolerate=0,
        created_at=backend.clock.now(),
        bounds=bounds,
        review_at=backend.clock.now() + timedelta(minutes=5),
    ).with_changes(**changes)
    return group, chunks


def _leased_parent(backend: Backend) -> tuple[str, str]:
    run, event = machine.new_run(
        run_id=new_run_id(),
        environment=backend.environment,
        task=TASK,
        queue=QUEUE,
        payload=None,
        now=backend.clock.now(),
    )
    backend.store.create_run(run, event, "null")
    token = new_lease_token()
    claim = machine.claim_lease(
        run, now=backend.clock.now(), owner="w", token=token, duration=LEASE, timeout=None
    )
    assert not isinstance(claim, machine.Skip)
    backend.store.apply(claim)
    return run.id, token


def test_a_group_opens_once_with_its_items(backend: Backend) -> None:
    group, chunks = _group(backend)
    stored = backend.store.groups.open_group(group, chunks, None)
    assert (stored.id, stored.total, stored.started) == (group.id, 3, 0)
    again, _ = _group(backend, total=7)
    assert backend.store.groups.open_group(again.with_changes(id=group.id), chunks, None).total == 3
    assert backend.store.groups.get_items(group.id, 0) == [
        Item(TASK, '{"n":0}'),
        Item(TASK, '{"n":1}'),
        Item(TASK, '{"n":2}'),
    ]
    assert backend.store.groups.get_group(new_run_id()) is None


def test_opening_is_fenced_on_the_parent_s_lease(backend: Backend) -> None:
    parent, token = _leased_parent(backend)
    group, chunks = _group(backend, parent_run_id=parent)
    with pytest.raises(LeaseLost):
        backend.store.groups.open_group(group, chunks, (parent, "not-the-token"))
    assert backend.store.groups.get_group(group.id) is None
    assert backend.store.groups.open_group(group, chunks, (parent, token)).id == group.id


def test_started_moves_only_from_the_value_read(backend: Backend) -> None:
    group, chunks = _group(backend)
    backend.store.groups.open_group(group, chunks, None)
    moved, stored = backend.store.groups.mark_started(group.id, 0)
    assert moved and stored is not None and stored.started == 1
    moved, stored = backend.store.groups.mark_started(group.id, 0)
    assert not moved and stored is not None and stored.started == 1
    moved, stored = backend.store.groups.mark_started(group.id, 1, 2)
    assert moved and stored is not None and stored.started == 3
    assert backend.store.groups.claim_next(group.id, 3) is None  # the limit is reached
    assert [backend.store.groups.claim_next(group.id, 5) for _ in range(3)] == [3, 4, None]


def test_the_join_and_the_stop_are_recorded_once(backend: Backend) -> None:
    group, chunks = _group(backend)
    backend.store.groups.open_group(group, chunks, None)
    stopped = backend.store.groups.mark_stopped(group.id, backend.clock.now())
    assert stopped is not None and stopped.stopped_at is not None
    assert backend.store.groups.mark_joined(group.id, backend.clock.now())
    assert not backend.store.groups.mark_joined(group.id, backend.clock.now())
    assert backend.store.groups.mark_stopped(group.id, backend.clock.now()) is None
    assert not backend.store.groups.mark_joined(new_run_id(), backend.clock.now())


def test_the_agenda_lists_unjoined_groups_a_page_at_a_time(backend: Backend) -> None:
    opened = []
    for _ in range(6):
        group, chunks = _group(backend)
        opened.append(backend.store.groups.open_group(group, chunks, None).id)
    backend.store.groups.mark_joined(opened[0], backend.clock.now())
    later = backend.clock.now() + timedelta(minutes=10)
    backend.store.groups.relist(opened[1], later + timedelta(hours=1), 0)
    found: list[str] = []
    for partition in agenda_partitions(backend.environment, AgendaKind.GROUP.value):
        cursor = None
        while True:
            page, cursor = backend.store.groups.group_agenda_page(partition, later, 1, cursor)
            found += [g.id for g in page]
            if cursor is None:
                break
    assert sorted(found) == sorted(opened[2:])
    partition = agenda_partitions(backend.environment, AgendaKind.GROUP.value)[0]
    with pytest.raises(InvalidCursor):
        backend.store.groups.group_agenda_page(partition, later, 1, "not-a-cursor")


def test_a_child_is_counted_by_the_write_that_ends_it_once(backend: Backend) -> None:
    group, chunks = _group(backend, total=1)
    backend.store.groups.open_group(group, chunks, None)
    child, event = machine.new_run(
        run_id=child_run_id(group.id, 0),
        environment=backend.environment,
        task=TASK,
        queue=QUEUE,
        payload={"n": 0},
        now=backend.clock.now(),
    )
    child = child.with_changes(group_id=group.id, group_index=0)
    backend.store.create_run(child, event, '{"n":0}')
    token = new_lease_token()
    claim = machine.claim_lease(
        child, now=backend.clock.now(), owner="w", token=token, duration=LEASE, timeout=None
    )
    assert not isinstance(claim, machine.Skip)
    claimed = backend.store.apply(claim)
    success = machine.record_success(claimed, token=token, result=4, now=backend.clock.now())
    done = backend.store.apply(success)
    assert done.is_terminal
    with contextlib.suppress(ConflictError):  # a resend (DynamoDB knows its own landed
        assert backend.store.apply(success).seq == done.seq  # write) or a replay: no change
    stored = backend.store.groups.get_group(group.id)
    assert stored is not None
    assert (stored.succeeded, stored.failed, stored.cancelled) == (1, 0, 0)
    assert stored.complete
    assert [r.result if r else None for r in backend.store.groups.children(stored, 0, 5)] == [4]
