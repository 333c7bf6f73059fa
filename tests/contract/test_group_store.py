"""The group store's contract, on the in-memory store and on DynamoDB over HTTP: a
group opens once (fenced on its parent's lease, and marking the parent, which then never
takes a TTL expiry), lanes are filled only from the ``started`` read and only while the
group runs, a child is counted once (however often its count is sent) and its lane
starts the next position, each lane its own, the join and the stop are recorded once,
the agenda lists unjoined groups with cursors, and a group is deleted with every item
chunk beside it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane_sqs import LeaseLost
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions
from runlane_sqs.core import machine
from runlane_sqs.core.errors import ConflictError, InvalidCursor
from runlane_sqs.core.groups import Group, GroupStatus, Item, child_run_id, chunk, redrive
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.model import RunStatus, new_lease_token, new_run_id
from tests.contract.store_backends import LEASE, QUEUE, Backend

TASK = "contract.task"


def _group(backend: Backend, total: int = 3, **changes: object) -> tuple[Group, list[list[Item]]]:
    """A group of ``total`` items in two lanes, none started (unless ``changes`` say)."""
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


def _running(backend: Backend, total: int = 3, **changes: object) -> Group:
    """A group opened with its first two positions running in lanes 0 and 1."""
    group, chunks = _group(backend, total, started=2, lanes={0: 0, 1: 1}, **changes)
    stored, written = backend.store.groups.open_group(group, chunks, None)
    assert written
    return stored


def _leased_parent(backend: Backend) -> tuple[str, str]:
    """A parent run, kept a day once finished, whose attempt holds a lease."""
    run, event = machine.new_run(
        run_id=new_run_id(),
        environment=backend.environment,
        task=TASK,
        queue=QUEUE,
        payload=None,
        now=backend.clock.now(),
    )
    run = run.with_changes(retention=timedelta(days=1))
    backend.store.create_run(run, event, "null")
    token = new_lease_token()
    claim = machine.claim_lease(
        run, now=backend.clock.now(), owner="w", token=token, duration=LEASE, timeout=None
    )
    assert not isinstance(claim, machine.Skip)
    backend.store.apply(claim)
    return run.id, token


def test_a_group_opens_once_with_its_items(backend: Backend) -> None:
    group, chunks = _group(backend, started=2, lanes={0: 0, 1: 1})
    stored, written = backend.store.groups.open_group(group, chunks, None)
    assert written
    assert (stored.id, stored.total, stored.started, dict(stored.lanes)) == (
        group.id,
        3,
        2,
        {0: 0, 1: 1},
    )
    assert backend.store.groups.get_group(group.id) == stored
    again, _ = _group(backend, total=7)
    stored, written = backend.store.groups.open_group(again.with_changes(id=group.id), chunks, None)
    assert not written and stored.total == 3
    assert backend.store.groups.get_items(stored, 0) == [
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
    assert backend.store.groups.open_group(group, chunks, (parent, token))[0].id == group.id


def test_opening_marks_the_parent_and_a_write_read_before_cannot_give_it_an_expiry(
    backend: Backend,
) -> None:
    parent, token = _leased_parent(backend)
    read_before = backend.store.get_run(parent)
    assert read_before is not None and not read_before.opened_groups
    group, chunks = _group(backend, parent_run_id=parent)
    backend.store.groups.open_group(group, chunks, (parent, token))
    marked = backend.store.get_run(parent)
    assert marked is not None and marked.opened_groups
    assert marked.seq == read_before.seq  # no event

    # finishing from the run read before would write the expiry of a run without groups
    success = machine.record_success(read_before, token=token, result=1, now=backend.clock.now())
    with pytest.raises(ConflictError) as refused:
        backend.store.apply(success)
    current = refused.value.current
    assert current is not None and current.opened_groups
    again = machine.record_success(current, token=token, result=1, now=backend.clock.now())
    done = backend.store.apply(again)
    assert done.status is RunStatus.SUCCEEDED
    stored = backend.store.get_run(parent)
    assert stored is not None and stored.opened_groups and stored.result == 1


def test_deleting_a_group_deletes_its_record_and_every_chunk_and_nothing_else(
    backend: Backend,
) -> None:
    groups = backend.store.groups
    group, chunks = _group(backend)
    groups.open_group(group, chunks, None)
    lost = group.with_changes(items_key=new_run_id())  # a second opening, refused
    assert not groups.open_group(lost, chunks, None)[1]  # its chunks were written first
    assert len(groups.get_items(lost, 0)) == 3
    other = _running(backend)

    groups.delete_group(group.id)

    assert groups.get_group(group.id) is None
    assert groups.get_items(group, 0) == [] and groups.get_items(lost, 0) == []
    assert groups.get_group(other.id) == other and len(groups.get_items(other, 0)) == 3
    groups.delete_group(group.id)  # nothing left to delete: nothing happens


def test_lanes_are_filled_only_from_the_value_read_and_while_the_group_runs(
    backend: Backend,
) -> None:
    group, chunks = _group(backend)
    backend.store.groups.open_group(group, chunks, None)
    moved, stored = backend.store.groups.mark_started(group.id, 0, {0: 0})
    assert moved and stored is not None and (stored.started, dict(stored.lanes)) == (1, {0: 0})
    moved, stored = backend.store.groups.mark_started(group.id, 0, {1: 0})
    assert not moved and stored is not None and dict(stored.lanes) == {0: 0}
    moved, stored = backend.store.groups.mark_started(group.id, 1, {1: 1})
    assert moved and stored is not None and dict(stored.lanes) == {0: 0, 1: 1}
    backend.store.groups.mark_stopped(group.id, backend.clock.now(), 0)
    moved, stored = backend.store.groups.mark_started(group.id, 2, {2: 2})
    assert not moved and stored is not None and stored.started == 2


def test_a_count_lands_once_and_its_lane_starts_the_next_position(backend: Backend) -> None:
    group = _running(backend, total=4)
    counts = backend.store.groups
    first = counts.count(group.id, 1, 1, RunStatus.SUCCEEDED, start=True)
    assert first.landed and first.group is not None
    assert (first.group.succeeded, first.group.started, dict(first.group.lanes)) == (
        1,
        3,
        {0: 0, 1: 2},
    )
    # the same count again (a lost response, a redelivered wakeup, maintenance): refused
    for start in (True, False):
        again = counts.count(group.id, 1, 1, RunStatus.SUCCEEDED, start=start)
        assert not again.landed and again.group == first.group
    # two lanes at once: each starts its own position
    zero = counts.count(group.id, 0, 0, RunStatus.SUCCEEDED, start=True)
    assert zero.landed and zero.group is not None and dict(zero.group.lanes) == {0: 3, 1: 2}
    # nothing left to start: refused with start, lands without
    assert not counts.count(group.id, 1, 2, RunStatus.SUCCEEDED, start=True).landed
    last = counts.count(group.id, 1, 2, RunStatus.SUCCEEDED, start=False)
    assert last.landed and last.group is not None and dict(last.group.lanes) == {0: 3}
    done = counts.count(group.id, 0, 3, RunStatus.SUCCEEDED, start=False)
    assert done.landed and done.group is not None
    assert (done.group.succeeded, dict(done.group.lanes), done.group.complete) == (4, {}, True)
    assert counts.get_group(group.id) == done.group


def test_a_failure_past_the_tolerance_starts_nothing_and_is_counted(backend: Backend) -> None:
    group = _running(backend, total=5, tolerate=1)
    counts = backend.store.groups
    tolerated = counts.count(group.id, 0, 0, RunStatus.FAILED, start=True)
    assert tolerated.landed and tolerated.group is not None
    after = tolerated.group
    assert (after.failed, after.lanes[0], after.allowance) == (1, 2, 0)
    assert not counts.count(group.id, 1, 1, RunStatus.CANCELLED, start=True).landed
    failing = counts.count(group.id, 1, 1, RunStatus.CANCELLED, start=False)
    assert failing.landed and failing.group is not None
    assert failing.group.status is GroupStatus.FAILED and failing.group.started == 3
    assert not counts.count(group.id, 0, 2, RunStatus.SUCCEEDED, start=True).landed
    moved, _ = counts.mark_started(group.id, 3, {1: 3})
    assert not moved
    # a child still running when the group joined is counted when it ends
    assert counts.mark_joined(group.id, backend.clock.now())
    late = counts.count(group.id, 0, 2, RunStatus.SUCCEEDED, start=False)
    assert late.landed and late.group is not None and late.group.succeeded == 1


def test_a_redrive_adds_positions_and_takes_the_failures_back(backend: Backend) -> None:
    group = _running(backend, total=2)
    counts = backend.store.groups
    counts.count(group.id, 0, 0, RunStatus.FAILED, start=False)
    failed = counts.count(group.id, 1, 1, RunStatus.SUCCEEDED, start=False).group
    assert failed is not None and failed.status is GroupStatus.FAILED
    assert counts.mark_joined(group.id, backend.clock.now())
    joined = counts.get_group(group.id)
    assert joined is not None
    reopened = redrive(joined, [(0, RunStatus.FAILED)]).with_changes(redrive_by=("ana", "fixed"))
    assert counts.reopen(reopened, 0, 1, 0)
    assert not counts.reopen(reopened, 0, 1, 0)  # once per generation
    stored = counts.get_group(group.id)
    assert stored is not None
    assert (stored.positions, stored.allowance, stored.failed, stored.joined_at) == (3, 0, 0, None)
    assert stored.redrive_by == ("ana", "fixed") and stored.room() == {0: 2}
    moved, filled = counts.mark_started(group.id, 2, stored.room())
    assert moved and filled is not None and dict(filled.lanes) == {0: 2}
    assert filled.at(2) == (0, filled.child_id(0)) and filled.replaced(2) == child_run_id(
        group.id, 0
    )


def test_the_join_and_the_stop_are_recorded_once(backend: Backend) -> None:
    group, chunks = _group(backend)
    backend.store.groups.open_group(group, chunks, None)
    stopped = backend.store.groups.mark_stopped(group.id, backend.clock.now(), 0)
    assert stopped is not None and stopped.stopped_at is not None
    assert backend.store.groups.mark_joined(group.id, backend.clock.now())
    assert not backend.store.groups.mark_joined(group.id, backend.clock.now())
    assert backend.store.groups.mark_stopped(group.id, backend.clock.now(), 0) is None
    assert not backend.store.groups.mark_joined(new_run_id(), backend.clock.now())


def test_the_agenda_lists_unjoined_groups_a_page_at_a_time(backend: Backend) -> None:
    opened = []
    for _ in range(6):
        group, chunks = _group(backend)
        opened.append(backend.store.groups.open_group(group, chunks, None)[0].id)
    backend.store.groups.mark_joined(opened[0], backend.clock.now())
    later = backend.clock.now() + timedelta(minutes=10)
    backend.store.groups.relist(opened[1], later + timedelta(hours=1))
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


def test_children_are_read_by_item_and_by_position(backend: Backend) -> None:
    group = _running(backend, total=3)
    child, event = machine.new_run(
        run_id=child_run_id(group.id, 1),
        environment=backend.environment,
        task=TASK,
        queue=QUEUE,
        payload={"n": 1},
        now=backend.clock.now(),
    )
    backend.store.create_run(child.with_changes(group_id=group.id, group_index=1), event, "{}")
    by_item = backend.store.groups.children(group, 0, 5)
    assert [c.id if c else None for c in by_item] == [None, child.id, None]
    by_position = backend.store.groups.children_at(group, [1, 0])
    assert [c.id if c else None for c in by_position] == [child.id, None]
