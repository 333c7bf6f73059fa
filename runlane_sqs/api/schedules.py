"""Operating schedules: ``app.schedules`` (list, get, pause, resume, trigger now).

Schedules are read from storage, so an operator's app needs none of the code that
defines them. Pause and resume are durable writes conditioned on the version read; a
resumed schedule follows its catch-up policy for what it missed while paused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace

from runlane_sqs.core.errors import IllegalTransition, RunlaneError, ScheduleNotFound
from runlane_sqs.core.model import Run
from runlane_sqs.core.schedule_state import (
    ScheduleState,
    ScheduleStatus,
    new_state,
    paused,
    resumed,
)
from runlane_sqs.core.schedules import check_schedule_id
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.schedules import ScheduleConflict, ScheduleStore

log = logging.getLogger("runlane_sqs.schedules")
MAX_WRITE_TRIES = 3
"""Pause or resume attempts when maintenance moves the schedule on at the same moment."""


class SchedulesApi:
    """``app.schedules``: read and operate the environment's stored schedules."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def _store(self) -> ScheduleStore:
        return self._engine.store.schedules

    def list(self) -> list[ScheduleState]:
        """Every stored schedule of the environment, by id (one ``Query`` per 100), as
        stored: a payload the app's codecs encoded is a
        :class:`~runlane_sqs.values.Sealed` (:meth:`get` opens it)."""
        return list(self._engine.scheduler.stored())

    def get(self, schedule_id: str) -> ScheduleState:
        """One stored schedule, its payload opened; one the app defines that maintenance
        has not stored yet is stored first (that schedule only). Raises
        :class:`~runlane_sqs.errors.ScheduleNotFound`, or
        :class:`~runlane_sqs.errors.ValueUnreadable` when its payload cannot be opened
        (:meth:`list` reads payloads without opening them)."""
        return self._opened(self._stored(schedule_id))

    def _opened(self, state: ScheduleState) -> ScheduleState:
        opened = self._engine.values.open_schedule(state.schedule)
        return state if opened is state.schedule else replace(state, schedule=opened)

    def _stored(self, schedule_id: str) -> ScheduleState:
        check_schedule_id(schedule_id)
        state = self._store.get_schedule(schedule_id)
        defined = self._engine.tasks.schedule(schedule_id)
        if state is None and defined is not None:
            now = self._engine.clock.now()
            stored = new_state(defined, now, self._engine.config.maintenance_period)
            with contextlib.suppress(ScheduleConflict):  # maintenance stored it meanwhile
                self._engine.scheduler.put(stored, None)
            state = self._store.get_schedule(schedule_id)
        if state is None:
            raise ScheduleNotFound(schedule_id)
        return state

    def pause(self, schedule_id: str) -> ScheduleState:
        """Stop creating runs until :meth:`resume` (durable; a no-op when paused)."""
        return self._change(schedule_id, "paused", _pause)

    def resume(self, schedule_id: str) -> ScheduleState:
        """Create runs again; missed occurrences follow the schedule's catch-up policy."""
        return self._change(schedule_id, "resumed", _resume)

    def trigger_now(self, schedule_id: str) -> Run:
        """An extra run of the schedule's task with its payload, linked to the schedule
        (``run.schedule_id``); the schedule's next occurrence does not move."""
        state = self._stored(schedule_id)
        if state.status is ScheduleStatus.REMOVED:
            raise IllegalTransition(f"schedule {schedule_id!r} was removed from the app's code")
        run = self._engine.scheduler.trigger_now(state)
        self._engine.publisher.publish_new([run])
        return run

    def _change(
        self,
        schedule_id: str,
        what: str,
        change: Callable[[ScheduleState, Engine], ScheduleState | None],
    ) -> ScheduleState:
        for _ in range(MAX_WRITE_TRIES):
            state = self._stored(schedule_id)
            after = change(state, self._engine)
            if after is None:
                return self._opened(state)
            try:
                self._engine.scheduler.put(after, state.version)
            except ScheduleConflict:
                continue
            log.info("schedule %s %s", schedule_id, what, extra={"schedule": schedule_id})
            return self._opened(after)
        raise RunlaneError(f"schedule {schedule_id!r} kept changing; try again")


def _pause(state: ScheduleState, engine: Engine) -> ScheduleState | None:
    if state.status is ScheduleStatus.PAUSED:
        return None
    if state.status is not ScheduleStatus.ACTIVE:
        raise IllegalTransition(
            f"schedule {state.id!r} is {state.status.value}; only an active one pauses"
        )
    return paused(state, engine.clock.now())


def _resume(state: ScheduleState, engine: Engine) -> ScheduleState | None:
    if state.status is ScheduleStatus.ACTIVE:
        return None
    if state.status is not ScheduleStatus.PAUSED:
        raise IllegalTransition(
            f"schedule {state.id!r} is {state.status.value}; only a paused one resumes"
        )
    return resumed(state, engine.clock.now())
