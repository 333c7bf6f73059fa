"""Results: a run seen as Celery's :class:`AsyncResult` (its state, result and traceback,
``get``, ``revoke``), and Celery's state names for a run's status (:data:`STATES`)."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from runlane_sqs.api.app import Runlane
from runlane_sqs.compat.celery.errors import TaskRevokedError, TimeoutError
from runlane_sqs.compat.celery.task_context import current_task_context
from runlane_sqs.core.errors import RunlaneError, RunWaitTimedOut
from runlane_sqs.core.model import Failure, Run, RunStatus
from runlane_sqs.core.retry import qualified_name

# Celery's state names, and the runlane status each one stands for ---------------------

PENDING = "PENDING"
STARTED = "STARTED"
RETRY = "RETRY"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"

STATES: dict[RunStatus, str] = {
    RunStatus.QUEUED: PENDING,
    RunStatus.PARKED: PENDING,
    RunStatus.RUNNING: STARTED,
    RunStatus.CANCEL_REQUESTED: STARTED,
    RunStatus.RELEASED: STARTED,
    RunStatus.RETRYING: RETRY,
    RunStatus.SUCCEEDED: SUCCESS,
    RunStatus.FAILED: FAILURE,
    RunStatus.CANCELLED: REVOKED,
}
"""A run's status as Celery names it; a run failed by its ``expires`` is ``REVOKED``."""


CELERY_STATE = "celery_state"
CELERY_META = "meta"
"""The keys of a run's state that ``update_state`` keeps: the custom state and its meta."""


def custom_state(run: Run) -> tuple[str, Any] | None:
    """The state and meta ``update_state`` kept on a running run, if any (a retry due, a
    finished run: Celery's own state)."""
    stored = run.state
    if run.status is not RunStatus.RUNNING or not isinstance(stored, dict):
        return None
    if CELERY_STATE not in stored:
        return None
    return str(stored[CELERY_STATE]), stored.get(CELERY_META)


class ResultApp(Protocol):
    """What a result reads through its app (:class:`~runlane_sqs.compat.celery.Celery`):
    the runs of its :class:`Runlane` app, and the exception a failed run is raised as."""

    @property
    def runlane_app(self) -> Runlane: ...

    def exception_of(self, run: Run) -> BaseException: ...


class AsyncResult:
    """A run seen as Celery's ``AsyncResult``: every property reads the run again."""

    def __init__(self, id: str, app: ResultApp) -> None:
        self.id = id
        self.app = app

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncResult) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def task_id(self) -> str:
        return self.id

    def _run(self) -> Run:
        return self.app.runlane_app.runs.get(self.id)

    @property
    def state(self) -> str:
        """``PENDING``, ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE`` or ``REVOKED``
        (:data:`STATES`); while the run is unfinished, the state ``update_state`` set, if
        any (``PROGRESS``)."""
        run = self._run()
        custom = custom_state(run)
        return custom[0] if custom is not None else state_of(run)

    @property
    def status(self) -> str:
        return self.state

    def ready(self) -> bool:
        return self._run().is_terminal

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    @property
    def result(self) -> Any:
        """The return value once ``SUCCESS``; the exception once failed, revoked or while
        a retry is due; otherwise ``None``."""
        run = self._run()
        if run.status is RunStatus.SUCCEEDED:
            return run.result
        if run.is_terminal or run.status is RunStatus.RETRYING:
            return self.app.exception_of(run)
        return None

    @property
    def info(self) -> Any:
        """``result``; while the run is unfinished, the ``meta`` ``update_state`` set."""
        custom = custom_state(self._run())
        return custom[1] if custom is not None else self.result

    @property
    def traceback(self) -> str | None:
        """The traceback of the latest failure (``None`` if there is none)."""
        failure = self._run().failure
        return failure.traceback if failure is not None else None

    def get(
        self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5
    ) -> Any:
        """Wait for the run (``app.runs.wait``) and return its result; a failed or revoked
        run raises its exception (returns it with ``propagate=False``); raises
        :class:`TimeoutError` after ``timeout`` seconds. ``interval`` is not used:
        the wait backs off by itself. Refused inside a task, as Celery refuses it."""
        if not current_task_context().called_directly:
            raise RuntimeError(
                "Never call result.get() within a task: a handler waits with "
                "ctx.wait_for_run (docs/waits.md), which holds no worker"
            )
        try:
            run = self.app.runlane_app.runs.wait(self.id, timeout=timeout)
        except RunWaitTimedOut as exc:
            raise TimeoutError(exc.run) from None
        if run.status is RunStatus.SUCCEEDED:
            return run.result
        error = self.app.exception_of(run)
        if propagate:
            raise error
        return error

    wait = get

    def revoke(self, terminate: bool = False) -> None:
        """Cancel the run (a running attempt is asked to stop, cooperatively)."""
        with contextlib.suppress(RunlaneError):  # Celery's revoke of a finished task is quiet
            self.app.runlane_app.runs.cancel(self.id, reason="revoked", actor="celery-compat")


def state_of(run: Run) -> str:
    """Celery's state of a run (:data:`STATES`)."""
    failure = run.failure
    if run.status is RunStatus.FAILED and failure is not None and revoked(failure):
        return REVOKED
    return STATES[run.status]


def revoked(failure: Failure) -> bool:
    """Whether ``failure`` is a :class:`TaskRevokedError` (the run's ``expires`` had
    passed)."""
    return failure.type == qualified_name(TaskRevokedError(""))
