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
import difflib
import fnmatch
import importlib
import inspect
import logging
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypedDict, TypeGuard, Unpack, cast, overload

from runlane_sqs.api.app import Runlane
from runlane_sqs.core.clock import to_timedelta
from runlane_sqs.core.errors import (
    ConfigurationError,
    InvalidPayloadError,
    RunlaneError,
    RunWaitTimedOut,
)
from runlane_sqs.core.model import JSON, Failure, Run, RunStatus
from runlane_sqs.core.names import check_queue
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
    pydantic: bool
    """Arguments annotated with a pydantic model are validated into it at the worker, a
    returned model is dumped to JSON (docs/from-celery.md, "pydantic=True")."""
    pydantic_strict: bool
    pydantic_context: dict[str, Any] | None
    pydantic_dump_kwargs: dict[str, Any] | None
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


# Settings (app.conf) ------------------------------------------------------------------

SETTING_DEFAULTS: dict[str, Any] = {
    "task_routes": {},
    "task_default_queue": "default",
    "task_annotations": {},
    "task_default_rate_limit": None,
    "task_time_limit": None,
    "task_soft_time_limit": None,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "result_accept_content": None,
    "enable_utc": True,
    "timezone": None,
    "task_acks_late": False,
    "task_reject_on_worker_lost": None,
    "task_acks_on_failure_or_timeout": True,
    "task_ignore_result": False,
    "task_track_started": False,
    "task_publish_retry": True,
    "task_publish_retry_policy": {},
    "result_extended": False,
}
"""The Celery settings the layer takes (``app.conf``, ``config_from_object``), with
Celery's defaults; docs/from-celery.md, "Settings", says what each becomes."""
TASK_SETTINGS = frozenset(
    {
        "task_routes",
        "task_default_queue",
        "task_annotations",
        "task_default_rate_limit",
        "task_time_limit",
        "task_soft_time_limit",
    }
)
"""The settings that shape a task when it is registered (its queue and options)."""

_BACKEND = (
    "runlane-sqs keeps runs in DynamoDB and sends wakeups on SQS: the Runlane app given as "
    "Celery(runlane=...) names the table and queues (RUNLANE_TABLE, RUNLANE_ENVIRONMENT, "
    "AWS_*); remove it"
)
_WORKER = (
    "worker settings are the runlane-sqs worker's options "
    "(runlane-sqs worker --concurrency N --queue Q; docs/operations.md)"
)
REFUSED_SETTINGS = {
    "broker_url": _BACKEND,
    "broker": _BACKEND,
    "broker_transport_options": _BACKEND,
    "broker_connection_retry_on_startup": _BACKEND,
    "result_backend": "results are stored with each run in DynamoDB; remove it",
    "backend": "results are stored with each run in DynamoDB; remove it",
    "result_expires": "runs are kept until pruned: app.runs.prune(older_than=...) "
    "(docs/operations.md)",
    "include": "import the task modules from the worker's module, or call "
    "app.autodiscover_tasks([...])",
    "imports": "import the task modules from the worker's module, or call "
    "app.autodiscover_tasks([...])",
    "task_always_eager": "test with the in-memory app and a manual clock: the runlane_app "
    "fixture, or runlane_sqs.testing.use_in_memory (docs/testing.md)",
    "task_eager_propagates": "test with the in-memory app (docs/testing.md)",
    "task_store_eager_result": "test with the in-memory app (docs/testing.md)",
    "beat_schedule": "give the task its schedules: @app.task(schedules=[Schedule.cron(...)]) "
    "(docs/from-celery.md, Beat)",
    "task_default_priority": PRIORITY,
    "task_queue_max_priority": PRIORITY,
    "task_inherit_parent_priority": PRIORITY,
    "task_queues": "queues are named by tasks and routes (task_routes, task_default_queue); "
    "runlane-sqs provision creates them",
    "task_create_missing_queues": "queues are named by tasks and routes; runlane-sqs "
    "provision creates them",
    "task_default_exchange": "routing is by queue only: task_routes to {'queue': name}",
    "task_default_routing_key": "routing is by queue only: task_routes to {'queue': name}",
    "task_default_delivery_mode": "every run is stored in DynamoDB (always persistent)",
    "task_compression": "give the Runlane app a codec: Runlane(codec=Zstd()) (docs/payloads.md)",
    "worker_concurrency": _WORKER,
    "worker_prefetch_multiplier": _WORKER,
    "worker_max_tasks_per_child": _WORKER,
    "worker_max_memory_per_child": _WORKER,
    "worker_send_task_events": "attempts are spans and metrics (docs/observability.md)",
    "task_send_sent_event": "attempts are spans and metrics (docs/observability.md)",
}
"""Celery settings the layer refuses, with what to use instead."""
OLD_SETTING_PREFIXES = ("CELERY", "BROKER_", "CELERYD_", "CELERYBEAT_")


def _check_setting(name: str, value: Any) -> Any:
    """``value`` for setting ``name``, checked; refuses a setting by name."""
    if name not in SETTING_DEFAULTS:
        reason = REFUSED_SETTINGS.get(name)
        if reason is None:
            close = difflib.get_close_matches(name, SETTING_DEFAULTS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            reason = f"not a setting runlane-sqs takes; {hint}known: {sorted(SETTING_DEFAULTS)}"
        raise UnsupportedOption(f"Celery setting {name}: {reason} (docs/from-celery.md)")
    check = _SETTING_CHECKS.get(name)
    return value if check is None else check(name, value)


def _check_default_queue(name: str, value: object) -> str:
    try:
        return check_queue(value)
    except ConfigurationError as exc:
        raise InvalidOptionValue(f"Celery setting {name}: {exc}") from None


def _check_rate_limit(name: str, value: object) -> object:
    rate_limits_of(name, value)
    return value


def _check_time_limit(name: str, value: object) -> object:
    if value is not None:
        _check_seconds(name, value)
    return value


def _check_serializer_setting(name: str, value: object) -> object:
    _check_serializer(value, f"Celery setting {name}")
    return value


def _check_content(name: str, value: object) -> object:
    if value is not None and (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not set(value) <= {"json", "application/json"}
    ):
        raise InvalidOptionValue(f"Celery setting {name}={value!r}: runs store JSON only")
    return value


def _check_utc(name: str, value: object) -> object:
    if value is not True:
        raise InvalidOptionValue(
            f"Celery setting {name}={value!r}: a naive eta is UTC here; give aware datetimes"
        )
    return value


def _check_timezone(name: str, value: object) -> object:
    if value not in (None, "UTC", "Etc/UTC"):
        raise InvalidOptionValue(
            f"Celery setting {name}={value!r}: times are UTC here; give aware datetimes, "
            "and a schedule its own zone (Schedule.cron(..., tz=...))"
        )
    return value


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidOptionValue(f"Celery setting {name}: seconds above 0, not {value!r}")


def _checked_annotations(value: object) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise UnsupportedOption(
            f"Celery setting task_annotations={value!r}: only a mapping of task names (or "
            "'*') to task options is supported, not annotation classes or lists"
        )
    checked: dict[str, dict[str, Any]] = {}
    for name, options in value.items():
        if not isinstance(name, str) or not isinstance(options, Mapping):
            raise UnsupportedOption(
                f"task_annotations {name!r}: {options!r}; map a task name or '*' to options"
            )
        for option in options:
            if isinstance(option, str) and option.startswith("@"):
                raise UnsupportedOption(
                    f"task_annotations {name!r}: {option!r}; method annotations are not "
                    "supported: use worker hooks (docs/hooks.md)"
                )
        _check_option_names(dict(options), TASK_OPTION_NAMES, f"task_annotations {name!r}")
        checked[name] = dict(options)
    return checked


_SETTING_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "task_routes": lambda _, value: _checked_routes(value),
    "task_default_queue": _check_default_queue,
    "task_annotations": lambda _, value: _checked_annotations(value),
    "task_default_rate_limit": _check_rate_limit,
    "task_time_limit": _check_time_limit,
    "task_soft_time_limit": _check_time_limit,
    "task_serializer": _check_serializer_setting,
    "result_serializer": _check_serializer_setting,
    "accept_content": _check_content,
    "result_accept_content": _check_content,
    "enable_utc": _check_utc,
    "timezone": _check_timezone,
}
"""How the value of each setting that needs it is checked (and normalised)."""


class Settings:
    """``app.conf``: Celery's settings this layer takes, read and set as attributes or
    items (``app.conf.task_routes = {...}``, ``app.conf.update(...)``). A setting the
    layer does not take is refused by name (:class:`UnsupportedOption`) with what to use
    instead; one that shapes tasks (routes, annotations, defaults) is refused once it
    would change a task registered already."""

    def __init__(self, app: Celery) -> None:
        object.__setattr__(self, "_app", app)
        object.__setattr__(self, "_values", {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def __getitem__(self, name: str) -> Any:
        if name not in SETTING_DEFAULTS:
            _check_setting(name, None)
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        return values.get(name, SETTING_DEFAULTS[name])

    def __setitem__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def __contains__(self, name: object) -> bool:
        return name in SETTING_DEFAULTS

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in SETTING_DEFAULTS else default

    def update(self, settings: Mapping[str, Any] = {}, /, **more: Any) -> None:
        """Set several settings at once: every one is checked before any is set."""
        given = {**settings, **more}
        checked = {name: _check_setting(name, value) for name, value in given.items()}
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        app: Celery = object.__getattribute__(self, "_app")
        if TASK_SETTINGS & set(checked):
            app.check_tasks_unchanged({**values, **checked}, sorted(TASK_SETTINGS & set(checked)))
        values.update(checked)

    def values(self) -> dict[str, Any]:
        """Every setting, as set or by default."""
        return {name: self[name] for name in SETTING_DEFAULTS}


def shaped(
    settings: Mapping[str, Any], name: str, options: CeleryTaskOptions
) -> tuple[str, CeleryTaskOptions]:
    """A task's queue and options under ``settings``: its annotations (``'*'``, then its
    name) over its own options, the settings' defaults under them; its queue from the
    first matching route, else its ``queue``, else ``task_default_queue``."""
    annotations = settings.get("task_annotations", {})
    merged: dict[str, Any] = dict(options)
    for key in ("*", name):
        merged.update(annotations.get(key, {}))
    for setting, option in (
        ("task_default_rate_limit", "rate_limit"),
        ("task_time_limit", "time_limit"),
        ("task_soft_time_limit", "soft_time_limit"),
    ):
        if settings.get(setting) is not None:
            merged.setdefault(option, settings[setting])
    queue = merged.get("queue") or settings.get("task_default_queue", "default")
    for pattern, route in settings.get("task_routes", {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            queue = route["queue"]
            break
    return queue, cast(CeleryTaskOptions, merged)


def setting_names_of(source: object, namespace: str | None) -> dict[str, Any]:
    """The settings an object or module holds: with ``namespace`` (``"CELERY"``), its
    ``CELERY_*`` attributes, lowercased without the prefix (Django's settings); without,
    its lowercase public attributes that are values (not modules, classes or functions).
    Celery 3's uppercase names are refused by name."""
    found: dict[str, Any] = {}
    prefix = f"{namespace}_" if namespace else None
    for attribute in dir(source):
        if attribute.startswith("_"):
            continue
        if prefix is not None:
            if attribute.startswith(prefix):
                found[attribute[len(prefix) :].lower()] = getattr(source, attribute)
            continue
        if attribute.startswith(OLD_SETTING_PREFIXES):
            raise UnsupportedOption(
                f"Celery setting {attribute}: Celery 3's uppercase names are not read; use "
                "the lowercase name (task_routes), or config_from_object(..., "
                "namespace='CELERY') for CELERY_TASK_ROUTES (docs/from-celery.md)"
            )
        value = getattr(source, attribute)
        if attribute.islower() and not (
            inspect.ismodule(value) or inspect.isclass(value) or callable(value)
        ):
            found[attribute] = value
    return found


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
        self.throws = _exception_types(options.get("throws", ()), "throws", self.name)
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
        with _in_task_context(CeleryTaskContext(args=args, kwargs=kwargs, task=self.name)):
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
        with _in_task_context(context):
            if self.models is None:
                return self._call(args, kwargs)
            args, kwargs = self.models.validated(args, kwargs)
            return self.models.dumped(self._call(args, kwargs))

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


@dataclass(frozen=True)
class PydanticArguments:
    """Celery's ``pydantic=True``: the task's parameters annotated with a pydantic model
    (a ``BaseModel`` subclass), by name and position, validated at the worker with
    ``pydantic_strict`` and ``pydantic_context``; a returned model is dumped with
    ``pydantic_dump_kwargs`` (JSON mode unless they say otherwise)."""

    task: str
    models: dict[str, Any]
    """The annotated parameters' models, by name."""
    positions: tuple[str, ...]
    """The parameters' names in order (a bound task's ``self`` left out)."""
    strict: bool
    context: dict[str, Any] | None
    dump: dict[str, Any]

    @classmethod
    def of(cls, fn: Callable[..., Any], task: str, options: CeleryTaskOptions) -> PydanticArguments:
        try:
            from pydantic import BaseModel  # noqa: PLC0415 (only with pydantic=True)
        except ImportError as exc:
            raise UnsupportedOption(
                f"{task}: pydantic=True needs pydantic (pip install 'runlane-sqs[pydantic]')"
            ) from exc
        parameters = list(inspect.signature(fn, eval_str=True).parameters.values())
        if options.get("bind", False):
            parameters = parameters[1:]
        models = {
            p.name: p.annotation
            for p in parameters
            if isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel)
        }
        return cls(
            task=task,
            models=models,
            positions=tuple(p.name for p in parameters),
            strict=options.get("pydantic_strict", False),
            context=options.get("pydantic_context"),
            dump={"mode": "json", **(options.get("pydantic_dump_kwargs") or {})},
        )

    def validated(
        self, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments, each annotated one validated into its model; a value that
        does not validate raises :class:`InvalidPayloadError` naming the argument and its
        fields (not retried)."""
        named = zip(self.positions, args, strict=False)
        given = [self._model(name, value) for name, value in named]
        given += args[len(given) :]
        return given, {key: self._model(key, value) for key, value in kwargs.items()}

    def _model(self, name: str, value: Any) -> Any:
        from pydantic import ValidationError  # noqa: PLC0415 (loaded with the models)

        model = self.models.get(name)
        if model is None:
            return value
        try:
            return model.model_validate(value, strict=self.strict, context=self.context)
        except ValidationError as exc:
            fields = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(the value)'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            raise InvalidPayloadError(
                f"{self.task}: argument {name!r} is not a valid {model.__name__}: {fields}"
            ) from None

    def dumped(self, value: Any) -> Any:
        """``value``, a model dumped (a returned one, or one given to the call)."""
        dump = getattr(value, "model_dump", None)
        return dump(**self.dump) if callable(dump) else value


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
        return self.app.runlane_app.runs.get(self.id)

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
        _check_option_names(dict(options), TASK_OPTION_NAMES, "task")

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


def _checked_routes(routes: object) -> dict[str, Mapping[str, str]]:
    if not isinstance(routes, Mapping):
        raise UnsupportedOption(
            f"task_routes {routes!r}: only a mapping of task names or fnmatch patterns to "
            "{'queue': name} is supported, not a list of routers"
        )
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
