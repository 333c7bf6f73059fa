"""What a run looks like to Django: a ``TaskResult`` built from the run and its attempts.

Statuses map as ``queued``, ``retrying`` and ``released`` to ``READY``; ``running`` and
``cancel_requested`` to ``RUNNING``; ``succeeded`` to ``SUCCESSFUL``; ``failed``,
``cancelled`` and ``parked`` (no worker registers the task) to ``FAILED``. Each failed
attempt is one error, with its exception's path and traceback; its ``exception_class``
finds a nested class too (``shop.models.Order.DoesNotExist``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runlane_sqs.core.attempts import Attempt
from runlane_sqs.core.errors import UnknownTaskError
from runlane_sqs.core.model import Failure, Run, RunStatus

if TYPE_CHECKING:
    from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
    from django_tasks.utils import get_module_path
else:
    try:  # Django 6
        from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
        from django.tasks.utils import get_module_path
    except ImportError:  # the django-tasks package
        from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
        from django_tasks.utils import get_module_path

STATUSES = {
    RunStatus.QUEUED: "READY",
    RunStatus.RETRYING: "READY",
    RunStatus.RELEASED: "READY",
    RunStatus.RUNNING: "RUNNING",
    RunStatus.CANCEL_REQUESTED: "RUNNING",
    RunStatus.SUCCEEDED: "SUCCESSFUL",
    RunStatus.FAILED: "FAILED",
    RunStatus.CANCELLED: "FAILED",
    RunStatus.PARKED: "FAILED",
}
"""The Django status (a ``TaskResultStatus`` value) of each run status."""


class RunCancelled(Exception):
    """The error a cancelled run's result shows: an operator cancelled the run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunError(TaskError):
    """A run's error as Django shows it; ``exception_class`` reads a path to a nested
    class (``shop.models.Order.DoesNotExist``) as its module, then attributes."""

    @property
    def exception_class(self) -> type[BaseException]:
        found = object_at(self.exception_class_path)
        if not inspect.isclass(found) or not issubclass(found, BaseException):
            raise ValueError(f"{self.exception_class_path!r} does not reference a valid exception.")
        return found


def object_at(path: str) -> object:
    """What ``path`` names: the longest prefix that is a module, then the attributes
    after it (``shop.models`` and ``Order.DoesNotExist``). A prefix that is not a module
    is not an error; a module that fails while it imports is. Raises ``ImportError``
    naming the path when nothing is found."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and f"{module_name}.".startswith(f"{exc.name}."):
                continue  # not a module: the name is an attribute of a shorter prefix
            raise
        attributes = parts[cut:]
        for attribute in attributes:
            try:
                found = getattr(found, attribute)
            except AttributeError:
                raise ImportError(
                    f"{path!r}: module {module_name!r} has no {'.'.join(attributes)!r}"
                ) from None
        return found
    raise ImportError(f"{path!r} is not a module path followed by a class name")


def ready_result(
    task: Task[Any, Any],
    result_id: str,
    payload: dict[str, Any],
    alias: str,
    enqueued_at: datetime | None,
) -> TaskResult[Any]:
    """The result of a run that has not started (``enqueued_at`` None: not written yet,
    it will be when the transaction commits)."""
    return TaskResult(
        task=task,
        id=result_id,
        status=TaskResultStatus("READY"),
        enqueued_at=enqueued_at,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=alias,
        errors=[],
        worker_ids=[],
    )


def run_result(
    task: Task[Any, Any], run: Run, attempts: Sequence[Attempt], alias: str
) -> TaskResult[Any]:
    """The result of ``run`` as stored, its attempts read from its history."""
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=run.id,
        status=TaskResultStatus(STATUSES[run.status]),
        enqueued_at=run.created_at,
        started_at=attempts[0].started_at if attempts else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        finished_at=run.updated_at if run.is_terminal else None,
        args=run.payload["args"],
        kwargs=run.payload["kwargs"],
        backend=alias,
        errors=errors_of(run, attempts),
        worker_ids=[a.worker or "" for a in attempts],
    )
    if run.status is RunStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", run.result)  # as django's backends do
    return result


def errors_of(run: Run, attempts: Sequence[Attempt]) -> list[TaskError]:
    """One error per failed or timed out attempt, then why the run ended without one
    (cancelled, parked, or failed by maintenance)."""
    errors = [error_of(a.failure) for a in attempts if a.failure is not None]
    if run.status is RunStatus.CANCELLED:
        errors.append(RunError(exception_class_path=get_module_path(RunCancelled), traceback=""))
    elif run.status is RunStatus.PARKED:
        errors.append(parked_error(run))
    elif run.status is RunStatus.FAILED and not errors and run.failure is not None:
        errors.append(error_of(run.failure))
    return errors


def error_of(failure: Failure) -> TaskError:
    """A recorded failure as Django shows it: the exception's path and its traceback."""
    text = failure.traceback or f"{failure.type}: {failure.message}\n"
    return RunError(exception_class_path=failure.type, traceback=text)


def parked_error(run: Run) -> TaskError:
    """The error of a run no worker could start: its task is registered by none."""
    text = (
        f"{get_module_path(UnknownTaskError)}: run {run.id} is parked: no worker that "
        f"received it registers task {run.task!r}. List the task's module in the backend's "
        f"TASK_MODULES; a worker that registers it unparks the run when it starts, or run "
        f"'runlane-sqs runs unpark {run.id}'.\n"
    )
    return RunError(exception_class_path=get_module_path(UnknownTaskError), traceback=text)
