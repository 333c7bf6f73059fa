"""The library's errors, by their documented import path (defined in
:mod:`runlane_sqs.core.errors`)."""

from runlane_sqs.core.errors import (
    ConfigurationError,
    ConflictError,
    IllegalTransition,
    InvalidCursor,
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

__all__ = [
    "ConfigurationError",
    "ConflictError",
    "IllegalTransition",
    "InvalidCursor",
    "InvalidKeyError",
    "InvalidPayloadError",
    "LeaseLost",
    "MissingResourceError",
    "PayloadTooLarge",
    "RunNotFound",
    "RunWaitTimedOut",
    "RunlaneError",
    "ScheduleNotFound",
    "StepError",
    "StorageError",
    "StorageUnavailable",
    "TransportError",
    "UnknownTaskError",
]
