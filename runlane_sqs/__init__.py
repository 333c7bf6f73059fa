"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups)."""

from runlane_sqs.app import Runlane
from runlane_sqs.clock import Clock, ManualClock, SystemClock
from runlane_sqs.config import RunlaneConfig
from runlane_sqs.context import TaskContext
from runlane_sqs.core.model import EventType, Failure, Lease, Run, RunEvent, RunStatus
from runlane_sqs.core.retry import Backoff, RetryPolicy
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
from runlane_sqs.tasks import Task
from runlane_sqs.worker import Worker

__all__ = [
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
    "ManualClock",
    "MissingResourceError",
    "PayloadTooLarge",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunNotFound",
    "RunStatus",
    "Runlane",
    "RunlaneConfig",
    "RunlaneError",
    "StorageError",
    "StorageUnavailable",
    "SystemClock",
    "Task",
    "TaskContext",
    "TransportError",
    "UnknownTaskError",
    "Worker",
]
