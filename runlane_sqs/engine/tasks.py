"""Tasks: registered handlers with their queue, retry policy and attempt timeout."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, UnknownTaskError
from runlane_sqs.core.model import JSON
from runlane_sqs.core.names import check_queue, check_task_name
from runlane_sqs.core.retry import NO_RETRY, RetryPolicy
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

    def __call__(self, ctx: TaskContext, payload: JSON) -> Any:
        return self.fn(ctx, payload)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


class TaskRegistry:
    """Tasks by name. Names are unique per app."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def register(
        self,
        fn: Handler,
        *,
        name: str | None,
        queue: str,
        retry: RetryPolicy | None,
        timeout: Duration | None,
    ) -> Task:
        task_name = check_task_name(name or f"{fn.__module__}.{fn.__qualname__}")
        if task_name in self._tasks:
            raise ConfigurationError(f"task {task_name!r} is already registered")
        if not callable(fn):
            raise ConfigurationError(f"task {task_name!r} handler is not callable")
        task = Task(
            name=task_name,
            fn=fn,
            queue=check_queue(queue),
            retry=retry or NO_RETRY,
            timeout=to_timedelta(timeout, "timeout") if timeout is not None else None,
        )
        self._tasks[task_name] = task
        return task

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
