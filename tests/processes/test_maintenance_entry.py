"""The deployable maintenance entry points against the moto server: the Lambda handler
an EventBridge schedule invokes, and ``runlane-sqs maintenance run --once``.

moto does not fire EventBridge ``rate()`` rules, so the tests invoke the handler with
the payload a scheduled event delivers.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.api.loading import ENV_APP
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.model import Run
from runlane_sqs.engine.reports import JOB_DUE
from runlane_sqs.lambdas import maintenance as lambda_handler
from tests.apps.recovery_tasks import PLAIN_TASK, register_recovery
from tests.emulators import REPO_ROOT, queue_counts, queue_url, subprocess_env

APP_MODULE = "tests.apps.maintenance_app"
APP_SPEC = f"{APP_MODULE}:app"
EXIT_APP_NOT_IMPORTABLE = 3

SCHEDULED_EVENT: dict[str, Any] = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2030-01-01T00:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/runlane-maintenance"],
    "detail": {},
}


class FakeLambdaContext:
    """The part of the Lambda context object the handler uses."""

    function_name = "runlane-maintenance"
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"

    def __init__(self, remaining_ms: int = 60_000) -> None:
        self.remaining_ms = remaining_ms
        self.calls = 0

    def get_remaining_time_in_millis(self) -> int:
        self.calls += 1
        return self.remaining_ms


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    """The test's own view of the backend (the entry points load theirs by name)."""
    app = register_recovery(make_app())
    app.provision()
    return app


SCHEDULED_EVENT_ALIAS = {"source": "aws.events", "detail-type": "Scheduled Event"}


@pytest.fixture
def fresh_handler(
    backend_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., dict[str, Any]]]:
    """The Lambda handler with no warm app, loading ``RUNLANE_APP`` for this test's table."""
    monkeypatch.setenv(ENV_APP, APP_SPEC)
    monkeypatch.setattr(lambda_handler, "_app", None)
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)
    yield lambda_handler.handler
    sys.modules.pop(APP_MODULE, None)


def due_run(make_app: Callable[..., Runlane]) -> Run:
    """A run due now whose wakeup was never published: triggered an hour ago (by a
    clock set back) with a 40 minute delay, beyond what SQS can delay."""
    clock = ManualClock(datetime.now(UTC) - timedelta(hours=1))
    past = register_recovery(make_app(clock=clock))
    run = past.trigger(PLAIN_TASK, {"n": 1}, delay=timedelta(minutes=40))
    assert run.wake_at is None
    return run


def test_the_lambda_handler_publishes_due_wakeups_for_a_scheduled_event(
    app: Runlane,
    make_app: Callable[..., Runlane],
    sqs: Any,
    fresh_handler: Callable[..., dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = due_run(make_app)
    caplog.set_level(logging.INFO, logger="runlane_sqs.maintenance")
    url = queue_url(sqs, app)
    assert queue_counts(sqs, url)["visible"] == 0
    context = FakeLambdaContext()

    report = fresh_handler(SCHEDULED_EVENT, context)

    assert context.calls >= 1
    assert json.loads(json.dumps(report)) == report
    assert report["jobs"][JOB_DUE]["published"] == 1
    assert report["out_of_time"] is False
    assert capsys.readouterr().out == ""  # the report is logged once, not printed too
    passes = [r for r in caplog.records if hasattr(r, "report")]
    assert len(passes) == 1
    assert passes[0].report == report  # type: ignore[attr-defined]
    assert passes[0].pass_id == report["pass_id"]  # type: ignore[attr-defined]
    assert "published 1" in passes[0].getMessage()
    assert queue_counts(sqs, url)["visible"] == 1

    assert app.worker().drain() == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_a_warm_lambda_reuses_its_app_and_finds_nothing_twice(
    app: Runlane,
    make_app: Callable[..., Runlane],
    fresh_handler: Callable[..., dict[str, Any]],
) -> None:
    due_run(make_app)
    first = fresh_handler(SCHEDULED_EVENT, FakeLambdaContext())
    warm = lambda_handler._app
    assert isinstance(warm, Runlane)
    assert warm.config.table == app.config.table
    second = fresh_handler(SCHEDULED_EVENT, FakeLambdaContext())
    assert lambda_handler._app is warm
    assert first["jobs"][JOB_DUE]["published"] == 1
    assert second["jobs"][JOB_DUE]["published"] == 0


def test_the_lambda_handler_runs_without_a_context(
    app: Runlane, make_app: Callable[..., Runlane], fresh_handler: Callable[..., dict[str, Any]]
) -> None:
    due_run(make_app)
    report = fresh_handler(None, None)
    assert report["jobs"][JOB_DUE]["published"] == 1


def test_the_deprecated_handler_path_still_runs_a_pass(
    app: Runlane, make_app: Callable[..., Runlane], fresh_handler: Callable[..., dict[str, Any]]
) -> None:
    """Deployed stacks name ``maintenance.lambda_handler.handler``: it is the same
    handler for one more release (CHANGELOG.md)."""
    from maintenance.lambda_handler import handler  # noqa: PLC0415 (the alias under test)

    assert handler is fresh_handler
    due_run(make_app)
    assert handler(SCHEDULED_EVENT_ALIAS, None)["jobs"][JOB_DUE]["published"] == 1


def _cli(backend_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runlane_sqs", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(backend_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cli_runs_one_pass_and_prints_one_json_report(
    app: Runlane, make_app: Callable[..., Runlane], backend_env: dict[str, str], sqs: Any
) -> None:
    run = due_run(make_app)
    done = _cli(backend_env, "maintenance", "run", "--once", "--app", APP_SPEC)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    report = json.loads(lines[0])
    assert report["jobs"][JOB_DUE]["published"] == 1
    assert set(report) >= {"started_at", "duration_ms", "jobs", "cursors", "out_of_time"}
    assert queue_counts(sqs, queue_url(sqs, app))["visible"] == 1
    assert app.worker().drain() == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_the_container_entry_runs_one_pass(app: Runlane, backend_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "maintenance", "--once", "--app", APP_SPEC],
        cwd=REPO_ROOT,
        env=subprocess_env(backend_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert json.loads(lines[0])["jobs"][JOB_DUE]["published"] == 0


def test_the_cli_exits_3_for_an_app_it_cannot_import(backend_env: dict[str, str]) -> None:
    done = _cli(backend_env, "maintenance", "run", "--once", "--app", "nonexistent.module:app")
    assert done.returncode == EXIT_APP_NOT_IMPORTABLE
    assert done.stdout == ""
    assert "nonexistent.module" in done.stderr
    assert "cannot import" in done.stderr
    assert "Traceback" not in done.stderr
