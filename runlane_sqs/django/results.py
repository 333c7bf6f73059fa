"""What a run looks like to Django: a ``TaskResult`` built from the run and its attempts.

Statuses map as ``queued``, ``retrying`` and ``released`` to ``READY``; ``running`` and
``cancel_requested`` to ``RUNNING``; ``succeeded`` to ``SUCCESSFUL``; ``failed``,
``cancelled`` and ``parked`` (no worker registers the task) to ``FAILED``. Each failed
attempt is one error, with its exception's path and traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        errors.append(TaskError(exception_class_path=get_module_path(RunCancelled), traceback=""))
    elif run.status is RunStatus.PARKED:
        errors.append(parked_error(run))
    elif run.status is RunStatus.FAILED and not errors and run.failure is not None:
        errors.append(error_of(run.failure))
    return errors


def error_of(failure: Failure) -> TaskError:
    """A recorded failure as Django shows it: the exception's path and its traceback."""
    text = failure.traceback or f"{failure.type}: {failure.message}\n"
    return TaskError(exception_class_path=failure.type, traceback=text)


def parked_error(run: Run) -> TaskError:
    """The error of a run no worker could start: its task is registered by none."""
    text = (
        f"{get_module_path(UnknownTaskError)}: run {run.id} is parked: no worker that "
        f"received it registers task {run.task!r}. List the task's module in the backend's "
        f"TASK_MODULES; a worker that registers it unparks the run when it starts, or run "
        f"'runlane-sqs runs unpark {run.id}'.\n"
    )
    return TaskError(exception_class_path=get_module_path(UnknownTaskError), traceback=text)
