"""The import paths users and deployed stacks name keep working after the package moved
into layers (CHANGELOG.md): the top-level names, the testing helpers, the async worker,
the Lambda consumer's first path, the errors module and the maintenance handler alias."""

from __future__ import annotations

import importlib

import pytest

import runlane_sqs
from runlane_sqs.api.app import Runlane
from runlane_sqs.lambdas import consumer, maintenance
from runlane_sqs.runtime.aio.worker import AsyncWorker
from runlane_sqs.runtime.worker import Worker

EXPORTED_BEFORE_THE_TYPED_FACADE = (
    "Attempt", "Backoff", "CatchUp", "Clock", "ConfigurationError", "ConflictError",
    "EventType", "Failure", "IllegalTransition", "InvalidKeyError", "InvalidPayloadError",
    "Lease", "LeaseLost", "LinkKind", "ManualClock", "MissingResourceError",
    "PayloadTooLarge", "PruneReport", "Queue", "RetryPolicy", "Run", "RunEvent", "RunHistory",
    "RunNotFound", "RunOutcome", "RunPage", "RunStatus", "RunWaitTimedOut", "Runlane",
    "RunlaneConfig", "RunlaneError", "Schedule", "ScheduleKind", "ScheduleNotFound",
    "ScheduleState", "ScheduleStatus", "SignalResult", "StepError", "StorageError",
    "StorageUnavailable", "SystemClock", "Task", "TaskContext", "Telemetry", "Token",
    "TokenAlreadyDecided", "TokenNotFound", "TokenResult", "TokenStatus", "TransportError",
    "UnknownTaskError", "Wait", "WaitKind", "WaitRequested", "Worker",
)  # fmt: skip
"""``runlane_sqs.__all__`` as it was written out by hand, before it was made from the
lazy table: every one of these stays importable from the top level."""


@pytest.mark.parametrize("name", EXPORTED_BEFORE_THE_TYPED_FACADE)
def test_every_earlier_top_level_name_still_imports(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from runlane_sqs import {name}", namespace)
    assert namespace[name] is not None
    assert name in runlane_sqs.__all__


def test_the_top_level_names_are_the_layered_ones() -> None:
    assert runlane_sqs.Runlane is Runlane
    assert runlane_sqs.Worker is Worker
    for name in runlane_sqs.__all__:
        assert getattr(runlane_sqs, name) is not None, name


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        ("runlane_sqs.aio", "AsyncWorker", AsyncWorker),
        ("runlane_sqs.aws_lambda", "sqs_handler", consumer.sqs_handler),
        ("runlane_sqs.aws_lambda", "NotAnSqsEvent", consumer.NotAnSqsEvent),
        ("maintenance.lambda_handler", "handler", maintenance.handler),
    ],
)
def test_an_earlier_path_names_the_same_object(module: str, name: str, expected: object) -> None:
    assert getattr(importlib.import_module(module), name) is expected


def test_the_testing_helpers_build_an_app_that_runs_a_task() -> None:
    from runlane_sqs.testing import (  # noqa: PLC0415 (the path under test)
        InMemoryRunStore,
        ManualClock,
        in_memory_app,
    )

    app = in_memory_app(clock=ManualClock())
    assert isinstance(app.store, InMemoryRunStore)

    @app.task(name="echo")
    def echo(ctx: object, payload: object) -> object:
        return payload

    run = app.trigger("echo", {"n": 1})
    assert app.worker().drain() == 1
    assert app.runs.get(run.id).result == {"n": 1}


def test_every_error_is_importable_from_the_errors_module_under_that_name() -> None:
    errors = importlib.import_module("runlane_sqs.errors")
    for name in errors.__all__:
        error = getattr(errors, name)
        assert issubclass(error, errors.RunlaneError)
        assert f"{error.__module__}.{error.__qualname__}" == f"runlane_sqs.errors.{name}"
