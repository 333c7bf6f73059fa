"""The ``TASKS`` backend: ``enqueue`` triggers a run, ``get_result`` reads it (docs/django.md).

A Django task is the runlane task named by its import path (``shop.tasks.send_receipt``;
``shop.tasks.send_receipt:emails`` on a queue other than ``default``), registered on the
backend's app when it is first enqueued and, in the worker, when ``TASK_MODULES`` are
imported. Its arguments are the run's payload, ``{"args": [...], "kwargs": {...}}``.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from django.conf import settings  # type: ignore[import-untyped]
from django.core import checks  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.core.signals import setting_changed  # type: ignore[import-untyped]
from django.db import close_old_connections, connections, transaction  # type: ignore[import-untyped]
from django.utils import timezone  # type: ignore[import-untyped]

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.loading import load_app
from runlane_sqs.core.config import RunlaneSettings
from runlane_sqs.core.errors import ConfigurationError, InvalidPayloadError, RunNotFound
from runlane_sqs.core.model import JSON, is_run_id
from runlane_sqs.core.names import check_queue, check_task_name
from runlane_sqs.django.results import ready_result, run_result
from runlane_sqs.engine.context import TaskContext as RunContext
from runlane_sqs.engine.hooks import AttemptOutcome
from runlane_sqs.engine.tasks import Handler

if TYPE_CHECKING:
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskResult
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued
    from django_tasks.utils import normalize_json
else:
    try:  # Django 6
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskResult
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued
        from django.tasks.utils import normalize_json
    except ImportError:  # the django-tasks package
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskResult
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
        from django_tasks.utils import normalize_json

log = logging.getLogger("runlane_sqs.django")
T = TypeVar("T")
P = ParamSpec("P")

OPTION_APP = "APP"
"""``module:attribute`` of a :class:`Runlane` app of yours to register the tasks on."""
OPTION_SETTINGS = "SETTINGS"
"""Keyword settings of ``Runlane.from_env`` (``environment``, ``region``, ...)."""
OPTION_TASK_MODULES = "TASK_MODULES"
"""The modules whose tasks the worker registers (and ``get_result`` looks up)."""
OPTION_ENQUEUE_ON_COMMIT = "ENQUEUE_ON_COMMIT"
"""``True`` (the ``default`` database, the default) or a database alias: inside that
database's transaction, the run is written when the transaction commits; ``False``
writes it at once, as django-tasks' own backends do."""
OPTION_NAMES = frozenset(
    {OPTION_APP, OPTION_SETTINGS, OPTION_TASK_MODULES, OPTION_ENQUEUE_ON_COMMIT}
)


class InvalidArguments(InvalidTask, TypeError):
    """A task's arguments cannot be a run's payload: not JSON, or too large. A
    ``TypeError`` too, as the arguments django-tasks cannot normalize raise."""


@dataclass
class Shared:
    """What every thread's instance of one backend shares. Django builds a backend per
    thread (``task_backends`` is thread-local, as database connections are); a task
    that enqueues from a worker's thread must reach the same app and tasks."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    app: Runlane | None = None
    tasks: dict[str, Task[Any, Any]] = field(default_factory=dict)
    """Django tasks by runlane task name."""
    modules_loaded: bool = False


_shared: dict[str, Shared] = {}
_shared_lock = threading.Lock()


def shared_by(alias: str) -> Shared:
    """The state of backend ``alias`` in this process, until ``TASKS`` changes."""
    with _shared_lock:
        return _shared.setdefault(alias, Shared())


def forget_backends(*, setting: str, **kwargs: Any) -> None:
    """New ``TASKS`` (``override_settings`` in a test): new apps, as Django makes new
    backends."""
    if setting == "TASKS":
        with _shared_lock:
            _shared.clear()


setting_changed.connect(forget_backends)


class RunlaneBackend(BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "runlane_sqs.django.backend.RunlaneBackend",
    "QUEUES": [...], "OPTIONS": {...}}}``; ``OPTIONS`` keys: ``SETTINGS``, ``APP``,
    ``TASK_MODULES``, ``ENQUEUE_ON_COMMIT`` (docs/django.md)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False
    """A queue's runs start in the order their wakeups arrive: a task with a priority
    other than 0 is refused (``InvalidTask``)."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._shared = shared_by(alias)

    # configuration ------------------------------------------------------------------

    @property
    def app(self) -> Runlane:
        """The runlane app runs are triggered on: ``APP``, or ``Runlane.from_env`` with
        ``SETTINGS`` (built on first use: importing a task module needs no AWS settings)."""
        shared = self._shared
        with shared.lock:
            if shared.app is None:
                shared.app = close_connections_around_attempts(self._build_app())
            return shared.app

    def _build_app(self) -> Runlane:
        spec = self.options.get(OPTION_APP)
        runlane_settings: Mapping[str, Any] = self.options.get(OPTION_SETTINGS) or {}
        unknown = sorted(set(runlane_settings) - set(RunlaneSettings.__annotations__))
        if unknown:
            raise ImproperlyConfigured(
                f"task backend {self.alias!r}: unknown {OPTION_SETTINGS} {unknown}; known: "
                f"{sorted(RunlaneSettings.__annotations__)}"
            )
        if spec is None:
            return Runlane.from_env(**runlane_settings)
        if runlane_settings:
            raise ImproperlyConfigured(
                f"task backend {self.alias!r}: give OPTIONS {OPTION_APP} or "
                f"{OPTION_SETTINGS}, not both (the app named has its own settings)"
            )
        return load_app(spec)

    @property
    def on_commit_database(self) -> str | None:
        """The database whose transactions defer enqueues to their commit, if any."""
        value = self.options.get(OPTION_ENQUEUE_ON_COMMIT, True)
        if value is True:
            return "default"
        return value or None

    @property
    def task_modules(self) -> list[str]:
        return list(self.options.get(OPTION_TASK_MODULES) or [])

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """Django's system checks (``manage.py check``): the options and the app."""
        yield from self._check_options()
        try:
            self.app  # noqa: B018 (building it checks the settings)
            for queue in sorted(self.queues):
                check_queue(queue)
        except (ConfigurationError, ImproperlyConfigured) as exc:
            yield checks.Error(f"task backend {self.alias!r}: {exc}", id="runlane_sqs.E002")

    def _check_options(self) -> Iterable[checks.CheckMessage]:
        unknown = sorted(set(self.options) - OPTION_NAMES)
        if unknown:
            yield checks.Error(
                f"task backend {self.alias!r}: unknown OPTIONS {unknown}",
                hint=f"known options: {sorted(OPTION_NAMES)}",
                id="runlane_sqs.E001",
            )
        database = self.on_commit_database
        if database is not None and database not in settings.DATABASES:
            yield checks.Error(
                f"task backend {self.alias!r}: {OPTION_ENQUEUE_ON_COMMIT} names database "
                f"{database!r}, which DATABASES does not define",
                id="runlane_sqs.E003",
            )

    # enqueueing ---------------------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks (``InvalidTask``), then that the task's import path and queue
        are a runlane task name and queue name."""
        super().validate_task(task)
        try:
            check_queue(task.queue_name)
            check_task_name(runlane_name(task))
        except ConfigurationError as exc:
            raise InvalidTask(f"task {task.module_path} cannot run on runlane-sqs: {exc}") from exc

    def enqueue(
        self,
        task: Task[P, T],
        args: P.args,  # type: ignore[valid-type]
        kwargs: P.kwargs,  # type: ignore[valid-type]
    ) -> TaskResult[T]:
        """Trigger a run of ``task`` (at its ``run_after``); inside a transaction of the
        ``ENQUEUE_ON_COMMIT`` database, when that transaction commits."""
        self.validate_task(task)
        payload = payload_of(task, args, kwargs)
        name = self.register(task)
        delay = delay_until(task.run_after, self.app.clock.now())
        database = self.on_commit_database
        if database is not None and connections[database].in_atomic_block:
            return self._enqueue_on_commit(task, name, payload, delay, database)
        try:
            run = self.app.trigger(name, payload, delay=delay)
        except InvalidPayloadError as exc:
            raise InvalidArguments(f"arguments of task {task.module_path}: {exc}") from exc
        result: TaskResult[T] = ready_result(task, run.id, payload, self.alias, run.created_at)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _enqueue_on_commit(
        self,
        task: Task[P, T],
        name: str,
        payload: dict[str, JSON],
        delay: timedelta | None,
        database: str,
    ) -> TaskResult[T]:
        """Check the trigger now and commit the run (``app.transaction()``) when
        ``database``'s transaction commits: nothing on a rollback. The run's id is known
        at once: it is the result's id."""
        runs = self.app.transaction()
        try:
            run = runs.trigger(name, payload, delay=delay)
        except InvalidPayloadError as exc:
            raise InvalidArguments(f"arguments of task {task.module_path}: {exc}") from exc
        result: TaskResult[T] = ready_result(task, run.id, payload, self.alias, None)

        def on_commit() -> None:
            runs.commit()
            object.__setattr__(result, "enqueued_at", run.created_at)  # as django's backends do
            task_enqueued.send(type(self), task_result=result)

        transaction.on_commit(on_commit, using=database)
        return result

    # tasks --------------------------------------------------------------------------

    def register(self, task: Task[Any, Any]) -> str:
        """Register ``task`` on the app (once) and return its runlane task name."""
        name = runlane_name(task)
        with self._shared.lock:
            if name not in self._shared.tasks:
                self.app.task(self._handler(task), name=name, queue=task.queue_name)
                self._shared.tasks[name] = task
        return name

    def load_task_modules(self) -> list[str]:
        """Import ``TASK_MODULES`` and register every task of this backend they hold, on
        its own queue and on each of the backend's ``QUEUES``; returns the runlane task
        names registered."""
        with self._shared.lock:
            for module_name in self.task_modules:
                module = importlib.import_module(module_name)
                for value in list(vars(module).values()):
                    if isinstance(value, self.task_class) and value.backend == self.alias:
                        for queue in sorted({value.queue_name, *self.queues}):
                            self.register(value.using(queue_name=queue))
            self._shared.modules_loaded = True
            return sorted(self._shared.tasks)

    def task_named(self, name: str) -> Task[Any, Any] | None:
        """The Django task of runlane task ``name``: registered, or found in
        ``TASK_MODULES`` (imported on the first name not registered)."""
        with self._shared.lock:
            if name not in self._shared.tasks and not self._shared.modules_loaded:
                self.load_task_modules()
            return self._shared.tasks.get(name)

    def _handler(self, task: Task[Any, Any]) -> Handler:
        """The runlane handler of ``task``: call it with the payload's arguments (the
        app's hooks close database connections around it)."""

        def handler(ctx: RunContext, payload: JSON) -> JSON:
            args, kwargs = payload["args"], payload["kwargs"]
            if task.takes_context:
                context = TaskContext(task_result=self.running_result(task, ctx.run_id))
                return normalize_json(task.call(context, *args, **kwargs))
            return normalize_json(task.call(*args, **kwargs))

        return handler

    def running_result(self, task: Task[Any, Any], run_id: str) -> TaskResult[Any]:
        """The result a running task's context holds (one read of the run's history)."""
        history = self.app.runs.history(run_id)
        return run_result(task, history.run, history.attempts, self.alias)

    # results ------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The run ``result_id`` as a result (one read of the run and its history);
        raises ``TaskResultDoesNotExist`` for no run, or a run of no task of this
        backend."""
        if not is_run_id(result_id):
            raise TaskResultDoesNotExist(result_id)
        try:
            history = self.app.runs.history(result_id)
        except RunNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        task = self.task_named(history.run.task)
        if task is None or not is_task_payload(history.run.payload):
            raise TaskResultDoesNotExist(
                f"run {result_id} is of task {history.run.task!r}, not a task of backend "
                f"{self.alias!r} (list its module in OPTIONS {OPTION_TASK_MODULES})"
            )
        return run_result(task, history.run, history.attempts, self.alias)


def close_connections_before(ctx: RunContext) -> None:
    """Before an attempt: close this thread's database connections that are unusable or
    older than ``CONN_MAX_AGE``, as Django does when a request starts."""
    close_old_connections()


def close_connections_after(ctx: RunContext, outcome: AttemptOutcome) -> None:
    """After an attempt, however it ended: the same, as Django does when a request ends."""
    close_old_connections()


def close_connections_around_attempts(app: Runlane) -> Runlane:
    """``app`` with hooks that close stale database connections around each attempt, on
    the thread that runs it (registered once, however many backends share the app)."""
    if close_connections_before not in app.hooks.before:
        app.hooks.before_attempt(close_connections_before)
        app.hooks.after_attempt(close_connections_after)
    return app


def backend_named(alias: str) -> RunlaneBackend:
    """The ``TASKS`` backend ``alias``, which must be a :class:`RunlaneBackend`."""
    backend = task_backends[alias]
    if not isinstance(backend, RunlaneBackend):
        raise ImproperlyConfigured(
            f"task backend {alias!r} is a {type(backend).__name__}, not a RunlaneBackend"
        )
    return backend


def runlane_name(task: Task[Any, Any]) -> str:
    """``module.function``, with ``:queue`` on a queue other than ``default``."""
    if task.queue_name == DEFAULT_TASK_QUEUE_NAME:
        return task.module_path
    return f"{task.module_path}:{task.queue_name}"


def payload_of(task: Task[Any, Any], args: Any, kwargs: Any) -> dict[str, JSON]:
    """``{"args": [...], "kwargs": {...}}``; raises :class:`InvalidArguments` for
    arguments that are not JSON."""
    try:
        payload = {"args": normalize_json(args), "kwargs": normalize_json(kwargs)}
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"arguments of task {task.module_path} are not JSON ({exc}): pass ids, "
            f"strings, numbers, lists and dicts"
        ) from exc
    return payload


def is_task_payload(payload: JSON) -> bool:
    return isinstance(payload, dict) and set(payload) == {"args", "kwargs"}


def delay_until(run_after: datetime | None, now: datetime) -> timedelta | None:
    """How long from ``now`` until ``run_after`` (``None``: at once, also for a time
    past; a naive time is in Django's ``TIME_ZONE``)."""
    if run_after is None:
        return None
    if timezone.is_naive(run_after):
        run_after = timezone.make_aware(run_after, timezone.get_default_timezone())
    wait = run_after - now
    return wait if wait > timedelta(0) else None
