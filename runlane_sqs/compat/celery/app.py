"""The app: :class:`Celery` over a :class:`Runlane` app, its tasks (``app.task``,
``send_task``), where its settings and task modules come from (``config_from_object``,
``autodiscover_tasks``), and the exception a failed run is raised as; then
``@shared_task``, a task of every app."""

from __future__ import annotations

import builtins
import importlib
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard, Unpack, overload

from runlane_sqs.api.app import Runlane
from runlane_sqs.compat.celery.errors import (
    COMPAT_ERRORS,
    InvalidOptionValue,
    TaskFailure,
    TaskRevokedError,
    UnsupportedOption,
)
from runlane_sqs.compat.celery.options import (
    TASK_OPTION_NAMES,
    CeleryTaskOptions,
    check_option_names,
)
from runlane_sqs.compat.celery.results import AsyncResult, revoked
from runlane_sqs.compat.celery.settings import Settings, setting_names_of, shaped
from runlane_sqs.compat.celery.tasks import CeleryTask
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Failure, Run, RunStatus

_Result = AsyncResult
"""The result class, by a name ``Celery.AsyncResult`` (the method) does not hide."""


class Celery:
    """Celery's app object over a :class:`Runlane` app: ``app.task``, ``send_task`` and
    ``AsyncResult`` create and read runs of ``runlane``; ``app.conf``,
    ``config_from_object`` and ``autodiscover_tasks`` take Celery's settings and task
    modules (docs/from-celery.md, "Settings")."""

    def __init__(
        self,
        main: str | None = None,
        *,
        runlane: Runlane,
        task_routes: Mapping[str, Mapping[str, str]] | None = None,
        **settings: Any,
    ) -> None:
        self.main = main
        self.runlane_app = runlane
        """The :class:`Runlane` app (:attr:`runlane` imports the discovered tasks first)."""
        self.tasks: dict[str, CeleryTask] = {}
        self._discovery: list[Callable[[], list[str]]] = []
        self.conf = Settings(self)
        """Celery's settings this layer takes (:class:`Settings`)."""
        self.conf.update(settings, **({"task_routes": task_routes} if task_routes else {}))
        for shared in list(_SHARED):
            shared.register(self)
        _APPS[:] = [ref for ref in _APPS if ref() is not None]
        _APPS.append(weakref.ref(self))

    def __repr__(self) -> str:
        return f"<Celery {self.main} on runlane {self.runlane_app.config.environment}>"

    @property
    def runlane(self) -> Runlane:
        """The :class:`Runlane` app, once the task modules ``autodiscover_tasks`` named
        are imported (the worker's module reads it: ``runlane = app.runlane``)."""
        self.import_discovered_tasks()
        return self.runlane_app

    @property
    def task_routes(self) -> dict[str, Mapping[str, str]]:
        """Celery's ``task_routes``: a task name (or ``fnmatch`` pattern) to
        ``{"queue": name}``; a task's route wins over its ``queue`` option."""
        routes: dict[str, Mapping[str, str]] = self.conf.task_routes
        return routes

    # settings and task modules ------------------------------------------------------

    def config_from_object(
        self,
        obj: object,
        silent: bool = False,
        force: bool = False,
        namespace: str | None = None,
    ) -> None:
        """Take the settings ``obj`` holds (a module, an object, or its import path
        ``"proj.celeryconfig"``, ``"django.conf:settings"``), at once; with
        ``namespace="CELERY"`` its ``CELERY_*`` names (``CELERY_TASK_ROUTES`` is
        ``task_routes``). ``silent`` ignores a path that cannot be imported; ``force``
        changes nothing (settings are always taken at once)."""
        if isinstance(obj, str):
            try:
                obj = _import_object(obj)
            except ImportError:
                if silent:
                    return
                raise
        self.conf.update(setting_names_of(obj, namespace))

    def autodiscover_tasks(
        self,
        packages: Sequence[str] | Callable[[], Sequence[str]] | None = None,
        related_name: str = "tasks",
        force: bool = False,
    ) -> None:
        """Import ``{package}.{related_name}`` of each package (those without one are
        passed over), as Celery does: when :attr:`runlane` is first read (the worker's
        module reads it), or at once with ``force=True``. Without ``packages``, the
        Django project's installed apps (Django must be set up by then)."""
        if not isinstance(related_name, str) or not related_name.isidentifier():
            raise InvalidOptionValue(f"autodiscover_tasks: related_name={related_name!r}")
        if not (packages is None or callable(packages)) and (
            isinstance(packages, str) or not all(isinstance(p, str) for p in packages)
        ):
            raise InvalidOptionValue(
                f"autodiscover_tasks: packages must be a list of package names, not {packages!r}"
            )
        source = packages if packages is not None else _django_apps
        self._discovery.append(lambda: discover(source, related_name))
        if force:
            self.import_discovered_tasks()

    def import_discovered_tasks(self) -> list[str]:
        """Import the task modules ``autodiscover_tasks`` named and not imported yet;
        returns their names."""
        imported: list[str] = []
        while self._discovery:
            imported.extend(self._discovery.pop(0)())
        return imported

    def check_tasks_unchanged(self, settings: Mapping[str, Any], names: Sequence[str]) -> None:
        """Refuse ``settings`` if they would give a task registered already another queue
        or options: a runlane task is registered once."""
        for task in self.tasks.values():
            if shaped(settings, task.name, task.given) != (task.queue, task.options):
                raise UnsupportedOption(
                    f"Celery settings {', '.join(names)} would change task {task.name!r}, "
                    "registered already: set them before the task modules are imported, or "
                    "give them to Celery(...) (docs/from-celery.md, Settings)"
                )

    # tasks --------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[..., Any], /) -> CeleryTask: ...

    @overload
    def task(
        self, fn: None = None, /, **options: Unpack[CeleryTaskOptions]
    ) -> Callable[[Callable[..., Any]], CeleryTask]: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Unpack[CeleryTaskOptions]
    ) -> CeleryTask | Callable[[Callable[..., Any]], CeleryTask]:
        """Register ``fn`` as a task and a runlane task of the same name; bare or with
        options (:class:`CeleryTaskOptions`)."""
        check_option_names(dict(options), TASK_OPTION_NAMES, "task")

        def register(handler: Callable[..., Any]) -> CeleryTask:
            task = CeleryTask(self, handler, options)
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    def queue_of(self, name: str, queue: str | None) -> str:
        """The queue of task ``name``: its route's (first match), else ``queue``, else
        ``task_default_queue``."""
        options: CeleryTaskOptions = {"queue": queue} if queue else {}
        return shaped(self.conf.values(), name, options)[0]

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """``apply_async`` of the task registered under ``name``."""
        task = self.tasks.get(name)
        if task is None:
            raise InvalidOptionValue(f"no task {name!r} on this app; tasks: {sorted(self.tasks)}")
        return task.apply_async(args, kwargs, **options)

    def AsyncResult(self, id: str) -> _Result:  # noqa: N802 (Celery's name)
        return AsyncResult(id, app=self)

    def exception_of(self, run: Run) -> BaseException:
        """The exception a failed or cancelled run is raised as: its own type when it is
        a built-in exception, named by a task's options, or defined or imported by
        a task's module; else :class:`TaskFailure`; the recorded traceback is added as a note."""
        failure = run.failure
        if run.status is RunStatus.CANCELLED or failure is None or revoked(failure):
            reason = failure.message if failure is not None else "cancelled"
            return TaskRevokedError(f"run {run.id} was revoked: {reason}")
        error = self._known(failure) or TaskFailure(failure)
        error.add_note(f"raised by run {run.id} of {run.task}; its traceback:\n{failure.traceback}")
        return error

    def _known(self, failure: Failure) -> BaseException | None:
        kind = self._exception_types().get(failure.type)
        if kind is None:
            return None
        try:
            return kind(failure.message)
        except Exception:  # an exception whose constructor takes other arguments
            return None

    def _exception_types(self) -> dict[str, type[BaseException]]:
        """Exception types by qualified name: the built-in ones, the ones a task's options
        name, and the ones its module defines or imports (none is imported by name)."""
        kinds: list[object] = [*vars(builtins).values(), *COMPAT_ERRORS]
        for task in self.tasks.values():
            kinds.extend(task.known_exceptions)
            kinds.extend(getattr(task.run, "__globals__", {}).values())
        return {_qualified(k): k for k in kinds if _is_exception_type(k)}


def discover(packages: Sequence[str] | Callable[[], Sequence[str]], related_name: str) -> list[str]:
    """Import ``{package}.{related_name}`` of each package that has one; a module that
    fails while it imports raises."""
    imported = []
    for package in packages() if callable(packages) else packages:
        name = f"{package}.{related_name}"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # a package without a task module
            raise
        imported.append(name)
    return imported


def _django_apps() -> list[str]:
    """The packages of the Django project's installed apps (Django set up)."""
    try:
        from django.apps import apps  # type: ignore[import-untyped]  # noqa: PLC0415 (Django projects only)
    except ImportError:
        raise InvalidOptionValue(
            "autodiscover_tasks() without packages reads Django's installed apps: name the "
            "packages, autodiscover_tasks(['proj.orders', ...])"
        ) from None
    return [config.name for config in apps.get_app_configs()]


def _import_object(spec: str) -> object:
    """``package.module`` or ``package.module:attribute``, imported."""
    module_name, _, attribute = spec.partition(":")
    module = importlib.import_module(module_name)
    if not attribute:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(
            f"config_from_object({spec!r}): module {module_name} has no {attribute}"
        ) from None


def _qualified(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_exception_type(value: object) -> TypeGuard[type[Exception]]:
    return isinstance(value, type) and issubclass(value, Exception)


# shared_task: the one global, kept for call sites that use it -----------------------

_APPS: list[weakref.ref[Celery]] = []
_SHARED: list[SharedTask] = []


class SharedTask:
    """What ``@shared_task`` returns: the task registered on every :class:`Celery` app
    (made before or after); calls go to the app made last that is still alive."""

    def __init__(self, fn: Callable[..., Any], options: CeleryTaskOptions) -> None:
        self.fn = fn
        self.options = options
        self.tasks: dict[int, CeleryTask] = {}

    def register(self, app: Celery) -> None:
        self.tasks[id(app)] = app.task(**self.options)(self.fn)

    def _current(self) -> CeleryTask:
        for ref in reversed(_APPS):
            app = ref()
            if app is not None and id(app) in self.tasks:
                return self.tasks[id(app)]
        raise RunlaneError(f"shared task {self.fn.__name__}: create a Celery(runlane=...) app")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._current()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._current(), name)


@overload
def shared_task(fn: Callable[..., Any], /) -> SharedTask: ...


@overload
def shared_task(
    fn: None = None, /, **options: Unpack[CeleryTaskOptions]
) -> Callable[[Callable[..., Any]], SharedTask]: ...


def shared_task(
    fn: Callable[..., Any] | None = None, /, **options: Unpack[CeleryTaskOptions]
) -> SharedTask | Callable[[Callable[..., Any]], SharedTask]:
    """Celery's ``@shared_task``: a task of every app, without naming one."""
    check_option_names(dict(options), TASK_OPTION_NAMES, "shared_task")

    def declare(handler: Callable[..., Any]) -> SharedTask:
        shared = SharedTask(handler, options)
        _SHARED.append(shared)
        for ref in _APPS:
            app = ref()
            if app is not None:
                shared.register(app)
        return shared

    return declare(fn) if fn is not None else declare
