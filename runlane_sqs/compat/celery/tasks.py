"""Tasks and calls: what ``@app.task`` returns (:class:`CeleryTask`), called here, or with
``delay`` and ``apply_async`` to create a run (the call's arguments as its payload, due
after ``countdown`` or at ``eta``, revoked after ``expires``); ``self.retry``; signatures,
refused; and, at the worker, the payload back into the call's arguments."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol, Unpack

from runlane_sqs.compat.celery.errors import (
    InvalidOptionValue,
    MaxRetriesExceededError,
    Retry,
    TaskRevokedError,
    UnsupportedOption,
    aware,
)
from runlane_sqs.compat.celery.options import (
    APPLY_OPTION_NAMES,
    ApplyOptions,
    CeleryTaskOptions,
    check_option_names,
    check_serializer,
    exception_types,
    rate_limits_of,
)
from runlane_sqs.compat.celery.pydantic_arguments import PydanticArguments
from runlane_sqs.compat.celery.results import CELERY_META, CELERY_STATE, AsyncResult, ResultApp
from runlane_sqs.compat.celery.retries import DEFAULT_MAX_RETRIES, retry_policy_of
from runlane_sqs.compat.celery.settings import Settings, shaped
from runlane_sqs.compat.celery.task_context import (
    CeleryTaskContext,
    current_task_context,
    in_task_context,
)
from runlane_sqs.core.clock import to_timedelta
from runlane_sqs.core.errors import ConfigurationError, InvalidPayloadError
from runlane_sqs.core.model import JSON
from runlane_sqs.core.values import encode_json
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.tasks import Task


class TaskApp(ResultApp, Protocol):
    """What a task reads of its app (:class:`~runlane_sqs.compat.celery.Celery`): its name,
    its settings and its :class:`Runlane` app, and what the task's results read."""

    @property
    def main(self) -> str | None: ...

    @property
    def conf(self) -> Settings: ...


def _check_values(name: str, options: CeleryTaskOptions) -> None:
    rate_limits_of(name, options.get("rate_limit"))
    check_serializer(options.get("serializer"), f"task {name!r}")
    unknown = set(options.get("retry_kwargs", {})) - {"max_retries", "countdown"}
    if unknown:
        raise UnsupportedOption(
            f"task {name!r}: retry_kwargs {sorted(unknown)} not supported (only max_retries "
            "and countdown)"
        )
    max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
    if max_retries is not None and (isinstance(max_retries, bool) or max_retries < 0):
        raise InvalidOptionValue(f"task {name!r}: max_retries must be None or >= 0")


class CeleryTask:
    """What ``@app.task`` returns: call it to run the function here, ``delay`` or
    ``apply_async`` to create a run. A bound task's ``self`` is this object."""

    def __init__(self, app: TaskApp, fn: Callable[..., Any], options: CeleryTaskOptions) -> None:
        if inspect.iscoroutinefunction(fn):
            raise UnsupportedOption(f"{fn.__qualname__}: Celery tasks are plain functions")
        self.app = app
        self.run = fn
        self.name = options.get("name") or f"{fn.__module__}.{fn.__name__}"
        self.given = options
        """The decorator's options (before the app's settings)."""
        self.queue, options = shaped(app.conf.values(), self.name, options)
        _check_values(self.name, options)
        self.bind = options.get("bind", False)
        self.typing = options.get("typing", True)
        self.models = (
            PydanticArguments.of(fn, self.name, options) if options.get("pydantic") else None
        )
        self.max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        self.policy = retry_policy_of(self.name, options)
        self.throws = exception_types(options.get("throws", ()), "throws", self.name)
        self.options = options
        """The options the task was registered with, the app's settings applied."""
        self.runlane_task: Task = app.runlane_app.task(
            self._handle,
            name=self.name,
            queue=self.queue,
            retry=self.policy,
            timeout=options.get("time_limit") or options.get("soft_time_limit"),
            schedules=options.get("schedules", ()),
            concurrency_key=options.get("concurrency_key"),
            key_limit=options.get("key_limit"),
            rate_limits=rate_limits_of(self.name, options.get("rate_limit")),
        )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<@task: {self.name} of {self.app.main}>"

    @property
    def request(self) -> CeleryTaskContext:
        return current_task_context()

    @property
    def known_exceptions(self) -> tuple[type[BaseException], ...]:
        """The exception types a failure of this task is raised as again by ``get``."""
        return (*self.throws, *self.policy.retry_for, *self.policy.non_retryable)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in this process, now (no run is created)."""
        with in_task_context(CeleryTaskContext(args=args, kwargs=kwargs, task=self.name)):
            return self._call(args, kwargs)

    def _call(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return self.run(self, *args, **kwargs) if self.bind else self.run(*args, **kwargs)

    def _handle(self, ctx: TaskContext, payload: JSON) -> JSON:
        """The runlane handler: the run's payload back into the call's arguments (with
        ``pydantic=True``, validated into the models they are annotated with, and a
        returned model dumped)."""
        args, kwargs, expires = arguments_of(payload, self.name)
        if expires is not None and self.app.runlane_app.clock.now() >= expires:
            raise TaskRevokedError(f"task {self.name} expired at {expires.isoformat()}")
        context = CeleryTaskContext(
            ctx.run_id, ctx.attempt - 1, tuple(args), kwargs, self.name, ctx
        )
        with in_task_context(context):
            if self.models is None:
                return self._call(args, kwargs)
            args, kwargs = self.models.validated(args, kwargs)
            return self.models.dumped(self._call(args, kwargs))

    def update_state(
        self, task_id: str | None = None, state: str | None = None, meta: JSON = None
    ) -> None:
        """Celery's custom states (``self.update_state(state="PROGRESS", meta={"current":
        i, "total": n})``): kept as the run's state (``ctx.set_state``), and ``current``
        and ``total`` in ``meta`` as its progress (``ctx.progress``), coalesced as those
        are (docs/progress.md). ``AsyncResult.state`` and ``.info`` read them back while
        the run is unfinished. Only the calling run's state can be updated; called
        directly (no run), it does nothing."""
        ctx = self.request.runlane_context
        if ctx is None:
            return
        if task_id is not None and task_id != ctx.run_id:
            raise ConfigurationError(
                f"update_state updates the calling run {ctx.run_id} only, not {task_id!r}"
            )
        ctx.set_state({CELERY_STATE: state or "PROGRESS", CELERY_META: meta})
        current = meta.get("current") if isinstance(meta, dict) else None
        if isinstance(current, int | float) and not isinstance(current, bool):
            total = meta.get("total") if isinstance(meta, dict) else None
            ctx.progress(current, total if isinstance(total, int | float) else None)

    # calling ---------------------------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        """``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | datetime | None = None,
        queue: str | None = None,
        **options: Unpack[ApplyOptions],
    ) -> AsyncResult:
        """Create a run of this task with ``args``/``kwargs`` as its payload, due after
        ``countdown`` seconds or at ``eta``, on ``queue`` (default: the task's); it is
        revoked if its first attempt starts after ``expires`` (seconds from now, or a
        time)."""
        check_option_names(dict(options), APPLY_OPTION_NAMES, "apply_async")
        check_serializer(options.get("serializer"), f"apply_async of {self.name!r}")
        call_args, call_kwargs = list(args or ()), dict(kwargs or {})
        if self.typing:
            self._check_signature(call_args, call_kwargs)
        if self.models is not None:  # a model given to the call travels as its JSON
            call_args = [self.models.dumped(value) for value in call_args]
            call_kwargs = {key: self.models.dumped(value) for key, value in call_kwargs.items()}
        now = self.app.runlane_app.clock.now()
        payload = call_payload(self.name, call_args, call_kwargs, expires_at(expires, now))
        run = self.app.runlane_app.trigger(
            self.runlane_task,
            payload,
            delay=delay_of(countdown, eta, now),
            idempotency_key=options.get("idempotency_key"),
            singleton_key=options.get("singleton_key"),
            ordering_key=options.get("ordering_key"),
            queue=queue,
        )
        return AsyncResult(run.id, app=self.app)

    def _check_signature(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Celery's ``typing=True``: arguments that do not fit the function are refused
        before a run is created."""
        bound = [self, *args] if self.bind else args
        try:
            inspect.signature(self.run).bind(*bound, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}() {exc}") from None

    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
    ) -> NoReturn:
        """End this attempt as failed and ask for another: raises :class:`Retry`, which
        the task's retry policy retries ``countdown`` seconds later, or at ``eta`` (a
        naive time is UTC), or else after the policy's own delay. Once the retries are
        used up, raises ``exc`` (or :class:`MaxRetriesExceededError`) and the run fails."""
        if args is not None or kwargs is not None or not throw:
            raise UnsupportedOption(
                "self.retry(args=, kwargs=, throw=False): a retry runs the same payload, "
                "and only a raised Retry asks for one"
            )
        _check_retry_time(countdown, eta)
        request = self.request
        if request.called_directly:
            raise exc or Retry(when=countdown or eta)
        limit = self.max_retries if max_retries is None else max_retries
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"can't retry {self.name}[{request.id}] args:{request.args} kwargs:{request.kwargs}"
            )
        raise Retry(exc=exc, when=countdown if countdown is not None else eta) from exc

    def s(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Canvas signatures are not supported: see docs/groups.md."""
        raise UnsupportedOption(
            f"{self.name}.s(): signatures are not supported; use app.runlane.group, "
            "app.runlane.chain or ctx.map (docs/groups.md)"
        )

    signature = s
    si = s


def _check_retry_time(countdown: object, eta: object) -> None:
    """``self.retry``'s ``countdown`` (seconds, a number) or ``eta`` (a ``datetime``)."""
    if countdown is not None and eta is not None:
        raise InvalidOptionValue("self.retry: give countdown= or eta=, not both")
    if countdown is not None and (
        isinstance(countdown, bool)
        or not isinstance(countdown, int | float)
        or not math.isfinite(countdown)
    ):
        raise InvalidOptionValue(f"self.retry: countdown must be seconds, not {countdown!r}")
    if eta is not None and not isinstance(eta, datetime):
        raise InvalidOptionValue(f"self.retry: eta must be a datetime, not {eta!r}")


def call_payload(
    name: str, args: Sequence[Any], kwargs: dict[str, Any], expires: datetime | None
) -> dict[str, JSON]:
    """A call's payload, ``{"args": [...], "kwargs": {...}}`` (and ``"expires"``); an
    argument that is not JSON raises :class:`InvalidPayloadError` naming it."""
    limit = 1 << 62  # the size is the trigger's to check, against the app's limit
    for position, value in enumerate(args):
        encode_json(value, what=f"argument {position} of {name}()", limit_bytes=limit)
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise InvalidPayloadError(f"keyword argument {key!r} of {name}() is not a string")
        encode_json(value, what=f"keyword argument {key!r} of {name}()", limit_bytes=limit)
    payload: dict[str, JSON] = {"args": list(args), "kwargs": kwargs}
    if expires is not None:
        payload["expires"] = expires.isoformat()
    return payload


def arguments_of(payload: JSON, name: str) -> tuple[list[Any], dict[str, Any], datetime | None]:
    """The arguments (and expiry) a payload holds; a payload of another shape (a run
    triggered by hand) raises :class:`InvalidPayloadError`, which is not retried."""
    if not isinstance(payload, dict) or not set(payload) <= {"args", "kwargs", "expires"}:
        raise InvalidPayloadError(f"{name}: payload must be {{'args': [...], 'kwargs': {{...}}}}")
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise InvalidPayloadError(f"{name}: payload args must be a list, kwargs an object")
    expires = payload.get("expires")
    try:
        return args, kwargs, datetime.fromisoformat(expires) if expires else None
    except (TypeError, ValueError):
        raise InvalidPayloadError(f"{name}: payload expires {expires!r} is not a time") from None


def delay_of(countdown: float | None, eta: datetime | None, now: datetime) -> timedelta | None:
    """The run's delay: ``countdown`` seconds or until ``eta``; a past time is now."""
    if countdown is not None and eta is not None:
        raise InvalidOptionValue("give countdown= or eta=, not both")
    if eta is not None:
        return max(aware(eta) - now, timedelta(0))
    if countdown is None:
        return None
    try:
        return to_timedelta(max(countdown, 0), "countdown")
    except ConfigurationError as exc:
        raise InvalidOptionValue(str(exc)) from None


def expires_at(expires: float | datetime | None, now: datetime) -> datetime | None:
    """When a run that has not started is revoked; refused if already past."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        at = aware(expires)
    else:
        try:
            at = now + to_timedelta(expires, "expires")
        except ConfigurationError as exc:
            raise InvalidOptionValue(str(exc)) from None
    if at <= now:
        raise InvalidOptionValue(f"expires {at.isoformat()} is already past: nothing would run")
    return at
