"""The schedule store port, on the in-memory store and on DynamoDB over HTTP: writes
conditioned on the version, listing by id in pages, the agenda in time order with
cursors, sync marks, and cursors refused before any read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs import Schedule
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, schedule_agenda_pk
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.schedule_state import ScheduleState, ScheduleStatus, new_state, paused
from runlane_sqs.errors import InvalidCursor
from runlane_sqs.ports.schedules import ScheduleConflict, ScheduleStore
from tests.contract.store_backends import Backend

NOW = datetime(2028, 1, 1, 12, tzinfo=UTC)


def state(schedule_id: str, minutes: int = 60) -> ScheduleState:
    schedule = Schedule.every(
        schedule_id, timedelta(minutes=minutes), payload={"id": schedule_id, "text": "<é>"}
    )
    return new_state(schedule.for_task("contract.task", "contract"), NOW, timedelta(minutes=1))


@pytest.fixture
def schedules(backend: Backend) -> ScheduleStore:
    return backend.store.schedules


def test_a_write_is_conditioned_on_the_version_it_read(schedules: ScheduleStore) -> None:
    first = state("a.b:c-d_e")
    schedules.put_schedule(first, expected_version=None)
    assert schedules.get_schedule(first.id) == first
    with pytest.raises(ScheduleConflict) as exists:
        schedules.put_schedule(first, expected_version=None)
    assert exists.value.current == first
    held = paused(first, NOW + timedelta(minutes=1))
    schedules.put_schedule(held, expected_version=first.version)
    with pytest.raises(ScheduleConflict) as stale:
        schedules.put_schedule(paused(first, NOW), expected_version=first.version)
    assert stale.value.current == held
    assert schedules.get_schedule(first.id) == held
    assert schedules.get_schedule("absent") is None


def test_schedules_list_by_id_in_pages(schedules: ScheduleStore) -> None:
    ids = [f"s{n:02d}" for n in range(7)]
    for schedule_id in reversed(ids):
        schedules.put_schedule(state(schedule_id), expected_version=None)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = schedules.list_schedules(3, cursor)
        assert len(page) <= 3
        seen.extend(s.id for s in page)
        if cursor is None:
            break
    assert seen == ids


def test_the_agenda_lists_active_schedules_due_by_a_time_in_time_order(
    schedules: ScheduleStore,
) -> None:
    stored = [state(f"due{n}", minutes=5 * (n + 1)) for n in range(8)]
    for item in stored:
        schedules.put_schedule(item, expected_version=None)
    held = paused(stored[0], NOW)
    schedules.put_schedule(held, expected_version=stored[0].version)
    until = NOW + timedelta(minutes=30)
    found: list[ScheduleState] = []
    for partition in agenda_partitions(_environment(schedules), AgendaKind.SCHEDULE.value):
        cursor: str | None = None
        while True:
            page, cursor = schedules.schedule_agenda_page(partition, until, 1, cursor)
            assert [s.due_at for s in page] == sorted(s.due_at for s in page)  # type: ignore[type-var]
            found.extend(page)
            if cursor is None:
                break
    expected = {s.id for s in stored[1:] if s.next_at is not None and s.next_at <= until}
    assert {s.id for s in found} == expected and len(found) == len(expected)
    assert all(s.status is ScheduleStatus.ACTIVE for s in found)


def test_sync_marks_are_kept_per_task_set(schedules: ScheduleStore) -> None:
    assert schedules.load_sync_mark("a1") is None
    schedules.save_sync_mark("a1", "f1")
    schedules.save_sync_mark("b2", "f2")
    schedules.save_sync_mark("a1", "f3")
    assert (schedules.load_sync_mark("a1"), schedules.load_sync_mark("b2")) == ("f3", "f2")


def test_cursors_it_did_not_produce_are_refused(schedules: ScheduleStore) -> None:
    for item in (state("one"), state("two")):
        schedules.put_schedule(item, expected_version=None)
    _, cursor = schedules.list_schedules(1, None)
    assert cursor is not None
    partition = schedule_agenda_pk(_environment(schedules), "one")
    for forged in ("not-a-cursor", cursor[:-4], "eyJwayI6IHsiUyI6ICJ4In19"):
        with pytest.raises(InvalidCursor):
            schedules.list_schedules(1, forged)
        with pytest.raises(InvalidCursor):
            schedules.schedule_agenda_page(partition, NOW, 1, forged)
    with pytest.raises(InvalidCursor):  # a listing cursor is not an agenda cursor
        schedules.schedule_agenda_page(partition, NOW, 1, cursor)


def _environment(schedules: ScheduleStore) -> str:
    environment: str = schedules.environment  # type: ignore[attr-defined]
    return environment
