"""The pytest plugin that ships with the package: a user's own test file, run by pytest
in a fresh session, gets an in-memory app, a manual clock, and its own ``from_env()``
app moved into memory for one test, with no AWS settings."""

from __future__ import annotations

import pytest

USER_APP = """
from runlane_sqs import RetryPolicy, Runlane

app = Runlane.from_env()  # as in the user's code: no AWS settings in this test session


@app.task(name="receipts.send", retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=30))
def send_receipt(ctx, payload):
    if payload.get("flaky") and ctx.attempt == 1:
        raise RuntimeError("mail server busy")
    return {"sent_to": payload["email"]}
"""

USER_TESTS = """
from jobs import app, send_receipt


def test_the_receipt_is_sent(runlane_in_memory, runlane_clock):
    runlane_in_memory(app)
    run = app.trigger(send_receipt, {"email": "ana@example.com", "flaky": True})
    assert app.worker().drain() == 1
    assert app.runs.get(run.id).status.value == "retrying"
    runlane_clock.advance(30)
    assert app.worker().drain() == 1
    assert app.runs.get(run.id).result == {"sent_to": "ana@example.com"}


def test_the_app_is_put_back_after_the_test():
    assert type(app.store).__name__ == "DynamoRunStore"


def test_a_fresh_in_memory_app(runlane_app):
    @runlane_app.task(name="echo")
    def echo(ctx, payload):
        return payload

    run = runlane_app.trigger("echo", {"n": 1})
    assert runlane_app.worker().drain() == 1
    assert runlane_app.runs.get(run.id).result == {"n": 1}
"""


def test_a_users_tests_use_the_fixtures_without_aws_settings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(pytester.path / "no-config"))
    pytester.makepyfile(jobs=USER_APP, test_receipts=USER_TESTS)
    pytester.syspathinsert()

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(passed=3)
