"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups).

The names below are imported on first use (PEP 562), so importing a submodule (the
Lambda consumer, the errors, the testing helpers) loads only what that submodule needs:
``from runlane_sqs import Runlane`` imports the app and boto3, ``runlane_sqs.Worker`` the
long-running worker (docs/deploy-lambda.md, "Cold start").

Each name is written twice: in the ``TYPE_CHECKING`` imports, which type checkers read
(``X as X`` marks it exported), and in ``_EXPORTS``, which says where it is looked up at
run time; ``__all__`` is made from ``_EXPORTS`` (tests/core/test_lazy_exports.py checks
that the two agree).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runlane_sqs.api.app import Runlane as Runlane
    from runlane_sqs.api.runs import PruneReport as PruneReport
    from runlane_sqs.api.runs import RunHistory as RunHistory
    from runlane_sqs.api.runs import RunPage as RunPage
    from runlane_sqs.api.telemetry import Telemetry as Telemetry
    from runlane_sqs.core.attempts import Attempt as Attempt
    from runlane_sqs.core.clock import Clock as Clock
    from runlane_sqs.core.clock import ManualClock as ManualClock
    from runlane_sqs.core.clock import SystemClock as SystemClock
    from runlane_sqs.core.config import RunlaneConfig as RunlaneConfig
    from runlane_sqs.core.config import RunlaneSettings as RunlaneSettings
    from runlane_sqs.core.errors import ConfigurationError as ConfigurationError
    from runlane_sqs.core.errors import ConflictError as ConflictError
    from runlane_sqs.core.errors import IllegalTransition as IllegalTransition
    from runlane_sqs.core.errors import InvalidKeyError as InvalidKeyError
    from runlane_sqs.core.errors import InvalidPayloadError as InvalidPayloadError
    from runlane_sqs.core.errors import LeaseLost as LeaseLost
    from runlane_sqs.core.errors import MissingResourceError as MissingResourceError
    from runlane_sqs.core.errors import PayloadTooLarge as PayloadTooLarge
    from runlane_sqs.core.errors import RunlaneError as RunlaneError
    from runlane_sqs.core.errors import RunNotFound as RunNotFound
    from runlane_sqs.core.errors import RunWaitTimedOut as RunWaitTimedOut
    from runlane_sqs.core.errors import ScheduleNotFound as ScheduleNotFound
    from runlane_sqs.core.errors import StepError as StepError
    from runlane_sqs.core.errors import StorageError as StorageError
    from runlane_sqs.core.errors import StorageUnavailable as StorageUnavailable
    from runlane_sqs.core.errors import TransportError as TransportError
    from runlane_sqs.core.errors import UnknownTaskError as UnknownTaskError
    from runlane_sqs.core.model import EventType as EventType
    from runlane_sqs.core.model import Failure as Failure
    from runlane_sqs.core.model import Lease as Lease
    from runlane_sqs.core.model import LinkKind as LinkKind
    from runlane_sqs.core.model import Run as Run
    from runlane_sqs.core.model import RunEvent as RunEvent
    from runlane_sqs.core.model import RunStatus as RunStatus
    from runlane_sqs.core.model import Wait as Wait
    from runlane_sqs.core.model import WaitKind as WaitKind
    from runlane_sqs.core.retry import Backoff as Backoff
    from runlane_sqs.core.retry import RetryPolicy as RetryPolicy
    from runlane_sqs.core.schedule_state import ScheduleState as ScheduleState
    from runlane_sqs.core.schedule_state import ScheduleStatus as ScheduleStatus
    from runlane_sqs.core.schedules import CatchUp as CatchUp
    from runlane_sqs.core.schedules import Schedule as Schedule
    from runlane_sqs.core.schedules import ScheduleKind as ScheduleKind
    from runlane_sqs.core.tokens import Token as Token
    from runlane_sqs.core.tokens import TokenAlreadyDecided as TokenAlreadyDecided
    from runlane_sqs.core.tokens import TokenNotFound as TokenNotFound
    from runlane_sqs.core.tokens import TokenResult as TokenResult
    from runlane_sqs.core.tokens import TokenStatus as TokenStatus
    from runlane_sqs.engine.context import RunOutcome as RunOutcome
    from runlane_sqs.engine.context import SignalResult as SignalResult
    from runlane_sqs.engine.context import TaskContext as TaskContext
    from runlane_sqs.engine.context import WaitRequested as WaitRequested
    from runlane_sqs.engine.tasks import Queue as Queue
    from runlane_sqs.engine.tasks import Task as Task
    from runlane_sqs.engine.tasks import TaskOptions as TaskOptions
    from runlane_sqs.engine.triggering import TriggerManyOptions as TriggerManyOptions
    from runlane_sqs.engine.triggering import TriggerOptions as TriggerOptions
    from runlane_sqs.runtime.worker import Worker as Worker

_EXPORTS: dict[str, tuple[str, ...]] = {
    "runlane_sqs.api.app": ("Runlane",),
    "runlane_sqs.api.runs": ("PruneReport", "RunHistory", "RunPage"),
    "runlane_sqs.api.telemetry": ("Telemetry",),
    "runlane_sqs.core.attempts": ("Attempt",),
    "runlane_sqs.core.clock": ("Clock", "ManualClock", "SystemClock"),
    "runlane_sqs.core.config": ("RunlaneConfig", "RunlaneSettings"),
    "runlane_sqs.core.errors": (
        "ConfigurationError",
        "ConflictError",
        "IllegalTransition",
        "InvalidKeyError",
        "InvalidPayloadError",
        "LeaseLost",
        "MissingResourceError",
        "PayloadTooLarge",
        "RunlaneError",
        "RunNotFound",
        "RunWaitTimedOut",
        "ScheduleNotFound",
        "StepError",
        "StorageError",
        "StorageUnavailable",
        "TransportError",
        "UnknownTaskError",
    ),
    "runlane_sqs.core.model": (
        "EventType",
        "Failure",
        "Lease",
        "LinkKind",
        "Run",
        "RunEvent",
        "RunStatus",
        "Wait",
        "WaitKind",
    ),
    "runlane_sqs.core.retry": ("Backoff", "RetryPolicy"),
    "runlane_sqs.core.schedule_state": ("ScheduleState", "ScheduleStatus"),
    "runlane_sqs.core.schedules": ("CatchUp", "Schedule", "ScheduleKind"),
    "runlane_sqs.core.tokens": (
        "Token",
        "TokenAlreadyDecided",
        "TokenNotFound",
        "TokenResult",
        "TokenStatus",
    ),
    "runlane_sqs.engine.context": ("RunOutcome", "SignalResult", "TaskContext", "WaitRequested"),
    "runlane_sqs.engine.tasks": ("Queue", "Task", "TaskOptions"),
    "runlane_sqs.engine.triggering": ("TriggerManyOptions", "TriggerOptions"),
    "runlane_sqs.runtime.worker": ("Worker",),
}
"""Where each top-level name is defined, as the ``TYPE_CHECKING`` imports above say."""
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> object:
    """A top-level name, its module imported on first use (then kept in this module)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
