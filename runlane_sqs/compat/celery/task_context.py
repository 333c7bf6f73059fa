"""The request a bound task reads, ``self.request`` (:class:`CeleryTaskContext`): the run's
id and its retries so far, set for the length of each task call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from runlane_sqs.core.model import JSON
from runlane_sqs.engine.context import TaskContext


@dataclass(frozen=True)
class CeleryTaskContext:
    """What Celery calls a task's request context, ``self.request`` of a bound task: the
    run's id and retries so far (``None`` and 0 when the task is called directly)."""

    id: str | None = None
    retries: int = 0
    """Attempts before this one (``ctx.attempt - 1``), lease expiries included."""
    args: tuple[JSON, ...] = ()
    kwargs: dict[str, JSON] = field(default_factory=dict)
    task: str | None = None
    runlane_context: TaskContext | None = None
    """The runlane :class:`TaskContext` (steps, waits, ``log``); ``None`` when called
    directly."""

    @property
    def called_directly(self) -> bool:
        return self.id is None


_TASK_CONTEXT: ContextVar[CeleryTaskContext | None] = ContextVar(
    "celery_task_context", default=None
)
_OUTSIDE = CeleryTaskContext()
"""The task context outside any task call."""


def current_task_context() -> CeleryTaskContext:
    """The task context of the task call this thread (or coroutine) is in."""
    return _TASK_CONTEXT.get() or _OUTSIDE


@contextlib.contextmanager
def in_task_context(context: CeleryTaskContext) -> Iterator[None]:
    """Make ``context`` the task context for the length of a task call."""
    token = _TASK_CONTEXT.set(context)
    try:
        yield
    finally:
        _TASK_CONTEXT.reset(token)
