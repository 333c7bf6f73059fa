"""The options ``@app.task`` and ``apply_async`` take, the ones refused with what to use
instead (docs/from-celery.md), and the checks of their values that the settings and the
tasks share (``rate_limit``, ``serializer``, exception types)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from runlane_sqs.compat.celery.errors import InvalidOptionValue, UnsupportedOption
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.rates import RateLimit
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.engine.tasks import KeyFunction


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


TASK_OPTION_NAMES = frozenset(CeleryTaskOptions.__optional_keys__)
APPLY_OPTION_NAMES = frozenset(ApplyOptions.__optional_keys__)


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


def check_option_names(given: dict[str, Any], allowed: frozenset[str], what: str) -> None:
    """Refuse an option of ``given`` not in ``allowed``, saying what to use instead when
    Celery has it (:data:`REFUSED_TASK_OPTIONS`, :data:`REFUSED_CALL_OPTIONS`)."""
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


def check_serializer(serializer: object, what: str) -> None:
    """Refuse a serializer other than JSON (``None``: not given)."""
    if serializer not in (None, "json"):
        raise InvalidOptionValue(f"{what}: serializer={serializer!r}; runs store JSON only")


def exception_types(value: object, option: str, name: str) -> tuple[type[BaseException], ...]:
    """Option ``option`` of task ``name`` (an exception type or a list of them) as a tuple
    of exception types."""
    types = tuple(value) if isinstance(value, list | tuple) else (value,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise InvalidOptionValue(f"task {name!r}: {option} must list exception types")
    return types
