"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups)."""

from runlane_sqs.app import Runlane
from runlane_sqs.clock import Clock, ManualClock, SystemClock
from runlane_sqs.config import RunlaneConfig
from runlane_sqs.context import RunOutcome, SignalResult, StepError, TaskContext, WaitRequested
from runlane_sqs.core.attempts import Attempt
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
from runlane_sqs.core.tokens import (
    Token,
    TokenAlreadyDecided,
    TokenNotFound,
    TokenResult,
    TokenStatus,
)
from runlane_sqs.errors import (
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
    StorageError,
    StorageUnavailable,
    TransportError,
    UnknownTaskError,
)
from runlane_sqs.runs import PruneReport, RunPage
from runlane_sqs.tasks import Task
from runlane_sqs.worker import Worker

__all__ = [
    "Attempt",
    "Backoff",
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
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunNotFound",
    "RunOutcome",
    "RunPage",
    "RunStatus",
    "Runlane",
    "RunlaneConfig",
    "RunlaneError",
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
