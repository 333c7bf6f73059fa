"""The settings layer: ``app.conf`` (:class:`Settings`), the Celery settings it takes with
their defaults, the ones it refuses by name with what to use instead, how the settings
shape a task's queue and options (:func:`shaped`), and the settings an object holds for
``config_from_object`` (:func:`setting_names_of`)."""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from runlane_sqs.compat.celery.errors import InvalidOptionValue, UnsupportedOption
from runlane_sqs.compat.celery.options import (
    PRIORITY,
    TASK_OPTION_NAMES,
    CeleryTaskOptions,
    check_option_names,
    check_serializer,
    rate_limits_of,
)
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.names import check_queue

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
    check_serializer(value, f"Celery setting {name}")
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
        check_option_names(dict(options), TASK_OPTION_NAMES, f"task_annotations {name!r}")
        checked[name] = dict(options)
    return checked


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


class ConfiguredApp(Protocol):
    """What ``app.conf`` asks of its app (:class:`~runlane_sqs.compat.celery.Celery`): to
    refuse settings that would change a task registered already."""

    def check_tasks_unchanged(self, settings: Mapping[str, Any], names: Sequence[str]) -> None: ...


class Settings:
    """``app.conf``: Celery's settings this layer takes, read and set as attributes or
    items (``app.conf.task_routes = {...}``, ``app.conf.update(...)``). A setting the
    layer does not take is refused by name (:class:`UnsupportedOption`) with what to use
    instead; one that shapes tasks (routes, annotations, defaults) is refused once it
    would change a task registered already."""

    def __init__(self, app: ConfiguredApp) -> None:
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
        app: ConfiguredApp = object.__getattribute__(self, "_app")
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
