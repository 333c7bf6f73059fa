"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups)."""

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.runs import PruneReport, RunPage
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
