"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups).

The names below are imported on first use (PEP 562), so importing a submodule (the
Lambda consumer, the errors, the testing helpers) loads only what that submodule needs:
``from runlane_sqs import Runlane`` imports the app and boto3, ``runlane_sqs.Worker`` the
long-running worker (docs/deploy-lambda.md, "Cold start").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runlane_sqs.api.app import Runlane
    from runlane_sqs.api.runs import PruneReport, RunHistory, RunPage
    from runlane_sqs.api.telemetry import Telemetry
    from runlane_sqs.core.attempts import Attempt
    from runlane_sqs.core.clock import Clock, ManualClock, SystemClock
    from runlane_sqs.core.config import RunlaneConfig
    from runlane_sqs.core.errors import (
        ConfigurationError,
        ConflictError,
        IllegalTransition,
        InvalidKeyError,
        InvalidPayloadError,
        LeaseLost,
        MissingResourceError,
        PayloadTooLarge,
        RunlaneError,
        RunNotFound,
        RunWaitTimedOut,
        ScheduleNotFound,
        StepError,
        StorageError,
        StorageUnavailable,
        TransportError,
        UnknownTaskError,
    )
    from runlane_sqs.core.model import (
        EventType,
        Failure,
        Lease,
        LinkKind,
        Run,
        RunEvent,
        RunStatus,
        Wait,
        WaitKind,
    )
    from runlane_sqs.core.retry import Backoff, RetryPolicy
    from runlane_sqs.core.schedule_state import ScheduleState, ScheduleStatus
    from runlane_sqs.core.schedules import CatchUp, Schedule, ScheduleKind
    from runlane_sqs.core.tokens import (
        Token,
        TokenAlreadyDecided,
        TokenNotFound,
        TokenResult,
        TokenStatus,
    )
    from runlane_sqs.engine.context import (
        RunOutcome,
        SignalResult,
        TaskContext,
        WaitRequested,
    )
    from runlane_sqs.engine.tasks import Queue, Task
    from runlane_sqs.runtime.worker import Worker

_EXPORTS: dict[str, tuple[str, ...]] = {
    "runlane_sqs.api.app": ("Runlane",),
    "runlane_sqs.api.runs": ("PruneReport", "RunHistory", "RunPage"),
    "runlane_sqs.api.telemetry": ("Telemetry",),
    "runlane_sqs.core.attempts": ("Attempt",),
    "runlane_sqs.core.clock": ("Clock", "ManualClock", "SystemClock"),
    "runlane_sqs.core.config": ("RunlaneConfig",),
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
    "runlane_sqs.engine.tasks": ("Queue", "Task"),
    "runlane_sqs.runtime.worker": ("Worker",),
}
"""Where each top-level name is defined: the same imports as the ``TYPE_CHECKING`` block
above, which is what type checkers read (tests/core/test_lazy_exports.py compares them)."""
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


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


__all__ = [
    "Attempt",
    "Backoff",
    "CatchUp",
    "Clock",
    "ConfigurationError",
    "ConflictError",
    "EventType",
    "Failure",
    "IllegalTransition",
    "InvalidKeyError",
    "InvalidPayloadError",
    "Lease",
    "LeaseLost",
    "LinkKind",
    "ManualClock",
    "MissingResourceError",
    "PayloadTooLarge",
    "PruneReport",
    "Queue",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunHistory",
    "RunNotFound",
    "RunOutcome",
    "RunPage",
    "RunStatus",
    "RunWaitTimedOut",
    "Runlane",
    "RunlaneConfig",
    "RunlaneError",
    "Schedule",
    "ScheduleKind",
    "ScheduleNotFound",
    "ScheduleState",
    "ScheduleStatus",
    "SignalResult",
    "StepError",
    "StorageError",
    "StorageUnavailable",
    "SystemClock",
    "Task",
    "TaskContext",
    "Telemetry",
    "Token",
    "TokenAlreadyDecided",
    "TokenNotFound",
    "TokenResult",
    "TokenStatus",
    "TransportError",
    "UnknownTaskError",
    "Wait",
    "WaitKind",
    "WaitRequested",
    "Worker",
]
