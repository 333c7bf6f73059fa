"""Celery's call sites on runlane-sqs, for a staged migration (docs/from-celery.md).

Change the module that builds the Celery app, keep the tasks and their callers::

    from runlane_sqs import Runlane
    from runlane_sqs.compat.celery import Celery

    app = Celery("shop", runlane=Runlane.from_env())


    @app.task(bind=True, max_retries=5, autoretry_for=(ConnectionError,))
    def charge(self, order_id, amount): ...


    result = charge.delay(7, 1250)  # a run of task "shop.tasks.charge"
    result.get(timeout=30)  # app.runs.wait, then the result (or the failure raised)

A call's arguments are its run's payload, ``{"args": [...], "kwargs": {...}}`` (JSON
only; ``"expires"`` is added when the call gives one). Workers are runlane's: they load
the :class:`Runlane` app from a module that also imports the tasks
(``runlane-sqs worker --app shop.worker:runlane``). What each Celery option becomes,
and the options refused, is in docs/from-celery.md.
"""

from __future__ import annotations

import builtins
import contextlib
import fnmatch
import inspect
import logging
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypedDict, TypeGuard, Unpack, overload

from runlane_sqs.api.app import Runlane
from runlane_sqs.core.clock import to_timedelta
from runlane_sqs.core.errors import (
    ConfigurationError,
    InvalidPayloadError,
    RunlaneError,
    RunWaitTimedOut,
)
from runlane_sqs.core.model import JSON, Failure, Run, RunStatus
from runlane_sqs.core.rates import RateLimit
from runlane_sqs.core.retry import RetryDecision, RetryPolicy, qualified_name
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.core.values import encode_json
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.tasks import KeyFunction, Task

log = logging.getLogger("runlane_sqs.compat.celery")

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

DEFAULT_MAX_RETRIES = 3
"""Celery's ``max_retries`` when a task does not set one."""
DEFAULT_RETRY_DELAY_SECONDS = 180
"""Celery's ``default_retry_delay``."""
DEFAULT_BACKOFF_MAX_SECONDS = 600
"""Celery's ``retry_backoff_max``."""
UNLIMITED_ATTEMPTS = 1_000_000
"""``max_attempts`` of a task with ``max_retries=None`` (Celery: retry for ever)."""

# Errors -------------------------------------------------------------------------------


class Retry(RunlaneError):
    """Raised by ``self.retry()``: the attempt failed and asks for another one, which the
    task's retry policy schedules (``exc`` is the error that caused it)."""

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | datetime | None = None,
    ) -> None:
        delay = f" in {when}s" if isinstance(when, int | float) else f" at {when}" if when else ""
        super().__init__(message or f"Retry{delay}: {exc!r}")
        self.exc = exc
        self.when = when
        """``countdown`` seconds, or ``eta``: when the retry is due (``None``: after the
        task's policy delay)."""

    def due_at(self, now: datetime) -> datetime | None:
        """When the retry is due, failed at ``now``: ``when`` seconds later, or at ``when``
        (a naive time is UTC; a past one is now); ``None``: the policy decides."""
        if isinstance(self.when, datetime):
            return max(_aware(self.when), now)
        if self.when is None:
            return None
        return now + timedelta(seconds=max(self.when, 0))


class MaxRetriesExceededError(RunlaneError):
    """``self.retry()`` without ``exc`` once the task's ``max_retries`` are used up."""


class TaskRevokedError(RunlaneError):
    """The run was cancelled (``AsyncResult.revoke``, ``runs cancel``), or its first
    attempt to start found its ``expires`` passed."""


class TimeoutError(RunWaitTimedOut, builtins.TimeoutError):
    """``AsyncResult.get(timeout=...)`` gave up before the run finished."""


class TaskFailure(RunlaneError):
    """A failed run whose exception type this app does not know (not a built-in
    exception, not named by a task's ``throws``, ``autoretry_for`` or
    ``dont_autoretry_for``, not in a task's module), or cannot make from its message:
    ``failure`` holds its type, message and traceback."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.type}: {failure.message}")
        self.failure = failure


class UnsupportedOption(RunlaneError, TypeError):
    """A Celery option runlane-sqs cannot honour, or one Celery does not have."""


class InvalidOptionValue(RunlaneError, ValueError):
    """A value of a supported option that runlane-sqs refuses (the message says why)."""


COMPAT_ERRORS = (Retry, MaxRetriesExceededError, TaskRevokedError)
"""The errors of this module a task's failure may be raised as again."""


# Options ------------------------------------------------------------------------------


class CeleryTaskOptions(TypedDict, total=False):
    """``@app.task(...)`` options; each may be left out (docs/from-celery.md says what
    each becomes)."""

    name: str
    bind: bool
    queue: str
    max_retries: int | None
    default_retry_delay: float
    autoretry_for: Sequence[type[BaseException]]
    dont_autoretry_for: Sequence[type[BaseException]]
    retry_kwargs: dict[str, Any]
    retry_backoff: bool | float
    retry_backoff_max: float
    retry_jitter: bool
    throws: Sequence[type[BaseException]]
    time_limit: float | None
    soft_time_limit: float | None
    acks_late: bool
    reject_on_worker_lost: bool
    ignore_result: bool
    track_started: bool
    typing: bool
    serializer: str
    rate_limit: str | int | None
    """Fleet-wide here (Celery's is per worker process): ``"10/m"``, ``"5/s"``, ``"100/h"``."""
    schedules: Sequence[Schedule]
    """runlane-sqs: maintenance creates runs of the task (Celery beat's job)."""
    concurrency_key: KeyFunction | None
    """runlane-sqs: a run's concurrency key from its payload (with ``key_limit``)."""
    key_limit: int | None
    """runlane-sqs: at most this many runs with one concurrency key at once."""


class ApplyOptions(TypedDict, total=False):
    """``apply_async(...)`` options besides the arguments, times and queue."""

    serializer: str
    ignore_result: bool
    retry: bool
    retry_policy: dict[str, Any]
    idempotency_key: str | None
    """runlane-sqs: a second call with this key returns the first call's run."""
    singleton_key: str | None
    """runlane-sqs: one unfinished run of the task per key."""
    ordering_key: str | None
    """runlane-sqs: runs with one ordering key execute one at a time, in call order."""


PRIORITY = (
    "SQS has no priorities: give urgent work a queue of its own (apply_async(queue=...)) "
    "and let workers poll it by weight (runlane-sqs worker --queues urgent=3,default)"
)
REFUSED_TASK_OPTIONS = {
    "base": "subclass-based tasks are not supported: keep the function and its options",
    "priority": PRIORITY,
    "trail": "child results are not tracked: use app.runlane.group or ctx.map",
}
REFUSED_CALL_OPTIONS = {
    "task_id": "runlane-sqs gives each run its id: pass idempotency_key= to make a "
    "repeated call return the same run",
    "link": "callbacks are not supported: use app.runlane.chain (docs/groups.md)",
    "link_error": "error callbacks are not supported: check result.failed() or the run's history",
    "priority": PRIORITY,
    "routing_key": "routing is by queue only: set the task's queue",
    "exchange": "routing is by queue only: set the task's queue",
    "headers": "runs carry no headers: put what the task needs in its arguments",
    "shadow": "a run is named by its task",
    "time_limit": "set time_limit on the task (a runlane task has one attempt deadline)",
    "soft_time_limit": "set soft_time_limit on the task",
}


def _check_option_names(given: dict[str, Any], allowed: frozenset[str], what: str) -> None:
    refused = {**REFUSED_TASK_OPTIONS, **REFUSED_CALL_OPTIONS}
    for name in given:
        if name not in allowed:
            reason = refused.get(name, "not a supported option")
            raise UnsupportedOption(f"{what} option {name}=: {reason} (docs/from-celery.md)")


RATE_UNITS = {"s": 1, "m": 60, "h": 3600}
"""Celery's rate units: per second, minute or hour."""


def rate_limits_of(name: str, rate_limit: object) -> list[RateLimit]:
    """Celery's ``rate_limit`` (``"10/m"``, ``"5/s"``, ``"100/h"``, or a number per
    second) as a fleet-wide :class:`RateLimit` of the task (docs/from-celery.md, "Rate
    limits"); ``None``: none."""
    if rate_limit is None:
        return []
    text = str(rate_limit) if isinstance(rate_limit, int | str) else ""
    count, _, unit = text.strip().partition("/")
    if isinstance(rate_limit, bool) or not count.isdigit() or unit not in ("", *RATE_UNITS):
        raise UnsupportedOption(
            f"task {name!r}: rate_limit must be a whole number of starts per s, m or h "
            f"(such as '10/m'), not {rate_limit!r}"
        )
    try:
        return [RateLimit(int(count), per=RATE_UNITS[unit or "s"])]
    except ConfigurationError as exc:
        raise UnsupportedOption(f"task {name!r}: rate_limit {rate_limit!r}: {exc}") from None


def _check_values(name: str, options: CeleryTaskOptions) -> None:
    rate_limits_of(name, options.get("rate_limit"))
    _check_serializer(options.get("serializer"), f"task {name!r}")
    unknown = set(options.get("retry_kwargs", {})) - {"max_retries", "countdown"}
    if unknown:
        raise UnsupportedOption(
            f"task {name!r}: retry_kwargs {sorted(unknown)} not supported (only max_retries "
            "and countdown)"
        )
    max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
    if max_retries is not None and (isinstance(max_retries, bool) or max_retries < 0):
        raise InvalidOptionValue(f"task {name!r}: max_retries must be None or >= 0")


def _check_serializer(serializer: object, what: str) -> None:
    if serializer not in (None, "json"):
        raise InvalidOptionValue(f"{what}: serializer={serializer!r}; runs store JSON only")


def _exception_types(value: object, option: str, name: str) -> tuple[type[BaseException], ...]:
    types = tuple(value) if isinstance(value, list | tuple) else (value,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise InvalidOptionValue(f"task {name!r}: {option} must list exception types")
    return types


# Retries ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, init=False)
class CeleryRetryPolicy(RetryPolicy):
    """A :class:`RetryPolicy` with Celery's rule on what is retried: a :class:`Retry`
    from ``self.retry()``, and exceptions of the ``autoretry_for`` types. Any other
    exception fails the run at once, as in Celery."""

    retry_for: tuple[type[BaseException], ...]

    def __init__(self, retry_for: tuple[type[BaseException], ...], **policy: Any) -> None:
        RetryPolicy.__init__(self, **policy)
        object.__setattr__(self, "retry_for", (Retry, *retry_for))

    def is_retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retry_for) and RetryPolicy.is_retryable(self, exc)

    def decide(
        self,
        attempt: int,
        now: datetime,
        *,
        retryable: bool = True,
        rand: float | None = None,
        exc: BaseException | None = None,
    ) -> RetryDecision:
        """The policy's decision, due when ``self.retry(countdown=)`` or ``eta=`` asked
        (any length) if a retry is left."""
        decision = RetryPolicy.decide(self, attempt, now, retryable=retryable, rand=rand)
        due = exc.due_at(now) if isinstance(exc, Retry) and decision.will_retry else None
        return decision if due is None else RetryDecision(retry_at=due)


def retry_policy_of(name: str, options: CeleryTaskOptions) -> CeleryRetryPolicy:
    """The runlane retry policy that stands for a task's Celery retry options."""
    retry_kwargs = options.get("retry_kwargs", {})
    max_retries = retry_kwargs.get("max_retries", options.get("max_retries", DEFAULT_MAX_RETRIES))
    attempts = UNLIMITED_ATTEMPTS if max_retries is None else max_retries + 1
    never = (
        TaskRevokedError,
        *_exception_types(options.get("dont_autoretry_for", ()), "dont_autoretry_for", name),
    )
    retry_for = _exception_types(options.get("autoretry_for", ()), "autoretry_for", name)
    backoff = options.get("retry_backoff", False)
    try:
        if backoff:
            return CeleryRetryPolicy(
                retry_for,
                max_attempts=attempts,
                backoff="exponential",
                delay=1 if backoff is True else backoff,
                max_delay=options.get("retry_backoff_max", DEFAULT_BACKOFF_MAX_SECONDS),
                jitter=1.0 if options.get("retry_jitter", True) else 0.0,
                non_retryable=never,
            )
        delay = retry_kwargs.get(
            "countdown", options.get("default_retry_delay", DEFAULT_RETRY_DELAY_SECONDS)
        )
        return CeleryRetryPolicy(
            retry_for,
            max_attempts=attempts,
            backoff="fixed",
            delay=delay,
            max_delay=max(to_timedelta(delay, "default_retry_delay"), timedelta(seconds=1)),
            non_retryable=never,
        )
    except ConfigurationError as exc:
        raise InvalidOptionValue(f"task {name!r}: {exc}") from None


# The request a bound task reads -------------------------------------------------------


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
def _in_task_context(context: CeleryTaskContext) -> Iterator[None]:
    token = _TASK_CONTEXT.set(context)
    try:
        yield
    finally:
        _TASK_CONTEXT.reset(token)


# Tasks --------------------------------------------------------------------------------

TASK_OPTION_NAMES = frozenset(CeleryTaskOptions.__optional_keys__)
APPLY_OPTION_NAMES = frozenset(ApplyOptions.__optional_keys__)


class CeleryTask:
    """What ``@app.task`` returns: call it to run the function here, ``delay`` or
    ``apply_async`` to create a run. A bound task's ``self`` is this object."""

    def __init__(self, app: Celery, fn: Callable[..., Any], options: CeleryTaskOptions) -> None:
        if inspect.iscoroutinefunction(fn):
            raise UnsupportedOption(f"{fn.__qualname__}: Celery tasks are plain functions")
        self.app = app
        self.run = fn
        self.name = options.get("name") or f"{fn.__module__}.{fn.__name__}"
        _check_values(self.name, options)
        self.bind = options.get("bind", False)
        self.typing = options.get("typing", True)
        self.max_retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        self.policy = retry_policy_of(self.name, options)
        self.throws = _exception_types(options.get("throws", ()), "throws", self.name)
        self.runlane_task: Task = app.runlane.task(
            self._handle,
            name=self.name,
            queue=app.queue_of(self.name, options.get("queue")),
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
        with _in_task_context(CeleryTaskContext(args=args, kwargs=kwargs, task=self.name)):
            return self._call(args, kwargs)

    def _call(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return self.run(self, *args, **kwargs) if self.bind else self.run(*args, **kwargs)

    def _handle(self, ctx: TaskContext, payload: JSON) -> JSON:
        """The runlane handler: the run's payload back into the call's arguments."""
        args, kwargs, expires = arguments_of(payload, self.name)
        if expires is not None and self.app.runlane.clock.now() >= expires:
            raise TaskRevokedError(f"task {self.name} expired at {expires.isoformat()}")
        context = CeleryTaskContext(
            ctx.run_id, ctx.attempt - 1, tuple(args), kwargs, self.name, ctx
        )
        with _in_task_context(context):
            return self._call(args, kwargs)

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
        _check_option_names(dict(options), APPLY_OPTION_NAMES, "apply_async")
        _check_serializer(options.get("serializer"), f"apply_async of {self.name!r}")
        call_args, call_kwargs = list(args or ()), dict(kwargs or {})
        if self.typing:
            self._check_signature(call_args, call_kwargs)
        now = self.app.runlane.clock.now()
        payload = call_payload(self.name, call_args, call_kwargs, expires_at(expires, now))
        run = self.app.runlane.trigger(
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


def _aware(at: datetime) -> datetime:
    """Celery's ``enable_utc``: a naive time is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def delay_of(countdown: float | None, eta: datetime | None, now: datetime) -> timedelta | None:
    """The run's delay: ``countdown`` seconds or until ``eta``; a past time is now."""
    if countdown is not None and eta is not None:
        raise InvalidOptionValue("give countdown= or eta=, not both")
    if eta is not None:
        return max(_aware(eta) - now, timedelta(0))
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
        at = _aware(expires)
    else:
        try:
            at = now + to_timedelta(expires, "expires")
        except ConfigurationError as exc:
            raise InvalidOptionValue(str(exc)) from None
    if at <= now:
        raise InvalidOptionValue(f"expires {at.isoformat()} is already past: nothing would run")
    return at


# Results ------------------------------------------------------------------------------


class AsyncResult:
    """A run seen as Celery's ``AsyncResult``: every property reads the run again."""

    def __init__(self, id: str, app: Celery) -> None:
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
        return self.app.runlane.runs.get(self.id)

    @property
    def state(self) -> str:
        """``PENDING``, ``STARTED``, ``RETRY``, ``SUCCESS``, ``FAILURE`` or ``REVOKED``
        (:data:`STATES`)."""
        return state_of(self._run())

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

    info = result

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
            run = self.app.runlane.runs.wait(self.id, timeout=timeout)
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
            self.app.runlane.runs.cancel(self.id, reason="revoked", actor="celery-compat")


_Result = AsyncResult


def state_of(run: Run) -> str:
    """Celery's state of a run (:data:`STATES`)."""
    failure = run.failure
    if run.status is RunStatus.FAILED and failure is not None and _revoked(failure):
        return REVOKED
    return STATES[run.status]


def _revoked(failure: Failure) -> bool:
    return failure.type == qualified_name(TaskRevokedError(""))


# The app ------------------------------------------------------------------------------


class Celery:
    """Celery's app object over a :class:`Runlane` app: ``app.task``, ``send_task`` and
    ``AsyncResult`` create and read runs of ``runlane``."""

    def __init__(
        self,
        main: str | None = None,
        *,
        runlane: Runlane,
        task_routes: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.main = main
        self.runlane = runlane
        self.task_routes = _checked_routes(task_routes or {})
        """Celery's ``task_routes``: a task name (or ``fnmatch`` pattern) to
        ``{"queue": name}``; a task's route wins over its ``queue`` option."""
        self.tasks: dict[str, CeleryTask] = {}
        for shared in list(_SHARED):
            shared.register(self)
        _APPS[:] = [ref for ref in _APPS if ref() is not None]
        _APPS.append(weakref.ref(self))

    def __repr__(self) -> str:
        return f"<Celery {self.main} on runlane {self.runlane.config.environment}>"

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
        _check_option_names(dict(options), TASK_OPTION_NAMES, "task")

        def register(handler: Callable[..., Any]) -> CeleryTask:
            task = CeleryTask(self, handler, options)
            self.tasks[task.name] = task
            return task

        return register(fn) if fn is not None else register

    def queue_of(self, name: str, queue: str | None) -> str:
        """The queue of task ``name``: its route's (first match), else ``queue``."""
        for pattern, route in self.task_routes.items():
            if fnmatch.fnmatchcase(name, pattern):
                return route["queue"]
        return queue or "default"

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
        if run.status is RunStatus.CANCELLED or failure is None or _revoked(failure):
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


def _checked_routes(routes: Mapping[str, Mapping[str, str]]) -> dict[str, Mapping[str, str]]:
    for pattern, route in routes.items():
        if (
            not isinstance(pattern, str)
            or not isinstance(route, Mapping)
            or set(route) != {"queue"}
        ):
            raise UnsupportedOption(
                f"task_routes {pattern!r}: {route!r}; a route is a name or fnmatch pattern "
                "mapped to {'queue': name} (routing is by queue only)"
            )
    return dict(routes)


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
    _check_option_names(dict(options), TASK_OPTION_NAMES, "shared_task")

    def declare(handler: Callable[..., Any]) -> SharedTask:
        shared = SharedTask(handler, options)
        _SHARED.append(shared)
        for ref in _APPS:
            app = ref()
            if app is not None:
                shared.register(app)
        return shared

    return declare(fn) if fn is not None else declare
