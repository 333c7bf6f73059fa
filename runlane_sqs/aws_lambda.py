"""The Lambda SQS consumer by its first import path; it lives in
:mod:`runlane_sqs.lambdas.consumer` (see CHANGELOG.md)."""

from runlane_sqs.lambdas.consumer import (
    DEFAULT_SAFETY_MARGIN_SECONDS,
    BatchItemFailure,
    BatchResponse,
    LambdaContext,
    NotAnSqsEvent,
    SqsHandler,
    logical_queue,
    sqs_handler,
)

__all__ = [
    "DEFAULT_SAFETY_MARGIN_SECONDS",
    "BatchItemFailure",
    "BatchResponse",
    "LambdaContext",
    "NotAnSqsEvent",
    "SqsHandler",
    "logical_queue",
    "sqs_handler",
]
