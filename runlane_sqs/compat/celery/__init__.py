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

The layer is a module a concept: ``errors``, the task and call ``options``, the
``settings`` (``app.conf``), ``retries``, the ``task_context`` a bound task reads, the
``tasks`` and their calls, ``pydantic_arguments``, ``results`` and the ``app``; import
its names from here.
"""

from runlane_sqs.compat.celery.app import (
    Celery,
    SharedTask,
    discover,
    shared_task,
)
from runlane_sqs.compat.celery.errors import (
    COMPAT_ERRORS,
    InvalidOptionValue,
    MaxRetriesExceededError,
    Retry,
    TaskFailure,
    TaskRevokedError,
    TimeoutError,
    UnsupportedOption,
)
from runlane_sqs.compat.celery.options import (
    APPLY_OPTION_NAMES,
    PRIORITY,
    RATE_UNITS,
    REFUSED_CALL_OPTIONS,
    REFUSED_TASK_OPTIONS,
    TASK_OPTION_NAMES,
    ApplyOptions,
    CeleryTaskOptions,
    rate_limits_of,
)
from runlane_sqs.compat.celery.pydantic_arguments import (
    PydanticArguments,
)
from runlane_sqs.compat.celery.results import (
    FAILURE,
    PENDING,
    RETRY,
    REVOKED,
    STARTED,
    STATES,
    SUCCESS,
    AsyncResult,
    state_of,
)
from runlane_sqs.compat.celery.retries import (
    DEFAULT_BACKOFF_MAX_SECONDS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_DELAY_SECONDS,
    UNLIMITED_ATTEMPTS,
    CeleryRetryPolicy,
    retry_policy_of,
)
from runlane_sqs.compat.celery.settings import (
    OLD_SETTING_PREFIXES,
    REFUSED_SETTINGS,
    SETTING_DEFAULTS,
    TASK_SETTINGS,
    Settings,
    setting_names_of,
    shaped,
)
from runlane_sqs.compat.celery.task_context import (
    CeleryTaskContext,
    current_task_context,
)
from runlane_sqs.compat.celery.tasks import (
    CeleryTask,
    arguments_of,
    call_payload,
    delay_of,
    expires_at,
)

__all__ = [
    "APPLY_OPTION_NAMES",
    "COMPAT_ERRORS",
    "DEFAULT_BACKOFF_MAX_SECONDS",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RETRY_DELAY_SECONDS",
    "FAILURE",
    "OLD_SETTING_PREFIXES",
    "PENDING",
    "PRIORITY",
    "RATE_UNITS",
    "REFUSED_CALL_OPTIONS",
    "REFUSED_SETTINGS",
    "REFUSED_TASK_OPTIONS",
    "RETRY",
    "REVOKED",
    "SETTING_DEFAULTS",
    "STARTED",
    "STATES",
    "SUCCESS",
    "TASK_OPTION_NAMES",
    "TASK_SETTINGS",
    "UNLIMITED_ATTEMPTS",
    "ApplyOptions",
    "AsyncResult",
    "Celery",
    "CeleryRetryPolicy",
    "CeleryTask",
    "CeleryTaskContext",
    "CeleryTaskOptions",
    "InvalidOptionValue",
    "MaxRetriesExceededError",
    "PydanticArguments",
    "Retry",
    "Settings",
    "SharedTask",
    "TaskFailure",
    "TaskRevokedError",
    "TimeoutError",
    "UnsupportedOption",
    "arguments_of",
    "call_payload",
    "current_task_context",
    "delay_of",
    "discover",
    "expires_at",
    "rate_limits_of",
    "retry_policy_of",
    "setting_names_of",
    "shaped",
    "shared_task",
    "state_of",
]
