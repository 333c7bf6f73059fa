"""Secrets in failures and logs, on every backend: an app's ``redact`` hook rewrites
every failure message and traceback before it is stored or logged (a hook that fails
hides the text and loses no outcome); log lines show at most 200 characters of a
failure's message, and name tokens by a digest, never by their id."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.core.redaction import digest
from tests.backends import Backend
from tests.behaviour.worker_support import drain

SECRET = "4111-1111-1111-1111"
LEAKY = "redaction.leaky"
WAITER = "redaction.waiter"


def register(app: Runlane) -> None:
    @app.task(name=LEAKY, retry=RetryPolicy(max_attempts=1))
    def leaky(ctx: TaskContext, payload: Any) -> Any:
        raise ValueError(f"card {SECRET} declined " + "x" * payload)

    @app.task(name=WAITER)
    def waiter(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload).value


def mask(text: str) -> str:
    return text.replace(SECRET, "****")


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="runlane_sqs")
    return caplog


def test_the_redact_hook_rewrites_the_stored_failure_and_its_log_lines(
    backend: Backend, caplog_info: pytest.LogCaptureFixture
) -> None:
    app = backend.app(register=register, redact=mask)
    run = app.trigger(LEAKY, 0)

    assert drain(app) == 1

    failure = app.runs.get(run.id).failure
    assert failure is not None
    assert failure.message == "card **** declined "
    assert "card **** declined" in failure.traceback and SECRET not in failure.traceback
    assert SECRET not in caplog_info.text
    assert "card **** declined" in caplog_info.text
    [line] = [r for r in caplog_info.records if r.levelno == logging.ERROR]
    assert line.traceback == failure.traceback  # the log line's is the redacted one too


def test_a_redact_hook_that_raises_hides_the_text_and_the_run_still_fails(
    backend: Backend, caplog_info: pytest.LogCaptureFixture
) -> None:
    app = backend.app(register=register, redact=lambda text: str(1 / 0))
    run = app.trigger(LEAKY, 0)

    assert drain(app) == 1

    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.FAILED
    assert stored.failure is not None
    hidden = "[redacted: the redact hook raised ZeroDivisionError]"
    assert (stored.failure.message, stored.failure.traceback) == (hidden, hidden)
    assert SECRET not in caplog_info.text


def test_a_log_line_shows_at_most_200_characters_of_a_failure_message(
    backend: Backend, caplog_info: pytest.LogCaptureFixture
) -> None:
    app = backend.app(register=register)
    run = app.trigger(LEAKY, 900)

    assert drain(app) == 1

    stored = app.runs.get(run.id).failure
    assert stored is not None and len(stored.message) == len(f"card {SECRET} declined ") + 900
    line = next(r for r in caplog_info.records if "run failed" in r.getMessage())
    assert len(line.getMessage().split("run failed: ", 1)[1]) == 200


def test_logs_name_a_token_by_its_digest_never_its_id(
    backend: Backend, caplog_info: pytest.LogCaptureFixture
) -> None:
    app = backend.app(register=register)
    token = app.tokens.create()
    run = app.trigger(WAITER, token.id)
    assert drain(app) == 1

    app.tokens.complete(token.id, "approved")
    assert drain(app) == 1

    assert app.runs.get(run.id).result == "approved"
    assert token.id not in caplog_info.text
    assert digest(token.id) in caplog_info.text
