"""Tasks: registered handlers with their queue, retry policy, attempt timeout and
schedules."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, UnknownTaskError
from runlane_sqs.core.limits import DEFAULT_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.model import JSON
from runlane_sqs.core.names import check_queue, check_task_name
from runlane_sqs.core.payload import encode_json
from runlane_sqs.core.retry import NO_RETRY, RetryPolicy
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.engine.context import TaskContext

Handler = Callable[[TaskContext, Any], Any]


@dataclass(frozen=True)
class Task:
    """A registered handler. Calling the task calls the handler directly."""

    name: str
    fn: Handler
    queue: str = "default"
    retry: RetryPolicy = NO_RETRY
    timeout: timedelta | None = None
    """Fixed attempt deadline; ``None`` lets an attempt run as long as it heartbeats."""
    schedules: tuple[Schedule, ...] = field(default=())
    """When maintenance creates runs of it by itself (bound to this task)."""

    def __call__(self, ctx: TaskContext, payload: JSON) -> Any:
        return self.fn(ctx, payload)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


@dataclass(frozen=True)
class ScheduleRules:
    """What the app's settings require of every schedule it registers."""

    maintenance_period: timedelta = timedelta(minutes=1)
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT_BYTES


class TaskRegistry:
    """Tasks by name. Names are unique per app, and so are schedule ids."""

    def __init__(self, rules: ScheduleRules | None = None) -> None:
        self._tasks: dict[str, Task] = {}
        self._schedules: dict[str, Schedule] = {}
        self._rules = rules or ScheduleRules()

    def register(
        self,
        fn: Handler,
        *,
        name: str | None,
        queue: str,
        retry: RetryPolicy | None,
        timeout: Duration | None,
        schedules: Iterable[Schedule] = (),
    ) -> Task:
        task_name = check_task_name(name or f"{fn.__module__}.{fn.__qualname__}")
        if task_name in self._tasks:
            raise ConfigurationError(f"task {task_name!r} is already registered")
        if not callable(fn):
            raise ConfigurationError(f"task {task_name!r} handler is not callable")
        queue = check_queue(queue)
        bound = self._check_schedules(task_name, queue, schedules)
        task = Task(
            name=task_name,
            fn=fn,
            queue=queue,
            retry=retry or NO_RETRY,
            timeout=to_timedelta(timeout, "timeout") if timeout is not None else None,
            schedules=bound,
        )
        self._tasks[task_name] = task
        self._schedules.update((s.id, s) for s in bound)
        return task

    def _check_schedules(
        self, task: str, queue: str, schedules: Iterable[Schedule]
    ) -> tuple[Schedule, ...]:
        """Every schedule of a new task, bound to it; raises before anything is kept."""
        if isinstance(schedules, Schedule) or not isinstance(schedules, Iterable):
            raise ConfigurationError(f"task {task!r}: schedules must be a list of Schedule")
        bound: list[Schedule] = []
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise ConfigurationError(
                    f"task {task!r}: schedules must be Schedule values, not {schedule!r}"
                )
            if schedule.id in self._schedules or any(s.id == schedule.id for s in bound):
                raise ConfigurationError(f"schedule id {schedule.id!r} is already registered")
            gap = schedule.fires_more_often_than(self._rules.maintenance_period)
            if gap is not None:
                raise ConfigurationError(
                    f"schedule {schedule.id!r}: its occurrences can be {gap} apart, less "
                    f"than the maintenance period {self._rules.maintenance_period} "
                    "(maintenance creates the runs)"
                )
            encode_json(
                schedule.payload,
                what=f"schedule {schedule.id!r} payload",
                limit_bytes=self._rules.payload_limit,
            )
            bound.append(schedule.for_task(task, queue))
        return tuple(bound)

    def schedules(self) -> list[Schedule]:
        """Every schedule of every registered task, bound to its task."""
        return list(self._schedules.values())

    def schedule(self, schedule_id: str) -> Schedule | None:
        return self._schedules.get(schedule_id)

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def resolve(self, task_or_name: Task | str) -> Task:
        name = task_or_name.name if isinstance(task_or_name, Task) else task_or_name
        task = self._tasks.get(name) if isinstance(name, str) else None
        if task is None:
            raise UnknownTaskError(str(name), list(self._tasks))
        return task

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tasks.values()})
