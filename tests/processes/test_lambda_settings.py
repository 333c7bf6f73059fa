"""The consumer's time settings: the safety margin from code or the environment, and a
function timeout that leaves too little time refused at the cold start."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runlane_sqs import ConfigurationError, Runlane, TaskContext
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.lambdas.consumer import MIN_WORKING_SECONDS, sqs_handler
from runlane_sqs.lambdas.deadline import ENV_SAFETY_MARGIN_SECONDS, ENV_TIMEOUT_SECONDS
from runlane_sqs.testing import InMemoryRunStore, ManualClock
from tests.processes.test_lambda_consumer import FakeContext, reported, sqs_record
from tests.templates import load_template


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def transport(clock: ManualClock) -> InMemoryTransport:
    return InMemoryTransport(clock)


@pytest.fixture
def app(clock: ManualClock, transport: InMemoryTransport) -> Runlane:
    store = InMemoryRunStore("test")
    app = Runlane(environment="test", clock=clock, store=store, transport=transport)

    @app.task(name="work")
    def work(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


def batch(app: Runlane, transport: InMemoryTransport, count: int) -> dict[str, Any]:
    for n in range(count):
        app.trigger("work", {"n": n})
    return {"Records": [sqs_record(m) for m in transport.receive("default", 10, 0)]}


def test_the_margin_comes_from_the_environment(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SAFETY_MARGIN_SECONDS, "30")
    event = batch(app, transport, 2)

    response = sqs_handler(app)(event, FakeContext(clock, 25, "r"))

    assert len(reported(response)) == 2  # 25 s left: less than the 30 s margin


def test_the_margin_given_in_code_wins_over_the_environment(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SAFETY_MARGIN_SECONDS, "30")
    event = batch(app, transport, 2)

    response = sqs_handler(app, safety_margin_seconds=5)(event, FakeContext(clock, 25, "r"))

    assert reported(response) == []


def test_a_timeout_that_leaves_too_little_time_is_refused(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's smallest timeout (15 s) with the default 10 s margin leaves 5 s."""
    monkeypatch.setenv(ENV_TIMEOUT_SECONDS, "15")
    with pytest.raises(ConfigurationError) as refused:
        sqs_handler(app)
    assert "leaves 5 s to start records" in str(refused.value)
    assert "at least 20 s" in str(refused.value)

    monkeypatch.setenv(ENV_SAFETY_MARGIN_SECONDS, "5")
    sqs_handler(app)  # 10 s to work in: accepted
    with pytest.raises(ConfigurationError):
        sqs_handler(app, safety_margin_seconds=6)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        (ENV_SAFETY_MARGIN_SECONDS, "ten", "must be a number of seconds"),
        (ENV_SAFETY_MARGIN_SECONDS, "-1", "must not be negative"),
        (ENV_SAFETY_MARGIN_SECONDS, "nan", "must be finite"),
        (ENV_TIMEOUT_SECONDS, "inf", "must be finite"),
        (ENV_TIMEOUT_SECONDS, "60s", "must be a number of seconds"),
        (ENV_TIMEOUT_SECONDS, "\u202e60", "must be a number of seconds"),
    ],
)
def test_bad_time_settings_are_refused_by_name(
    app: Runlane, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as refused:
        sqs_handler(app)
    assert variable in str(refused.value) and says in str(refused.value)


@pytest.mark.parametrize("margin", [-1.0, float("nan"), float("inf")])
def test_a_bad_margin_in_code_is_refused(app: Runlane, margin: float) -> None:
    with pytest.raises(ConfigurationError, match="safety_margin_seconds"):
        sqs_handler(app, safety_margin_seconds=margin)


def test_a_short_first_invocation_is_logged_once_without_the_timeout_variable(
    app: Runlane,
    clock: ManualClock,
    transport: InMemoryTransport,
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = sqs_handler(app)
    with caplog.at_level(logging.ERROR, logger="runlane_sqs.lambda"):
        handler(batch(app, transport, 1), FakeContext(clock, 15, "r1"))
        handler(batch(app, transport, 1), FakeContext(clock, 15, "r2"))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "raise the timeout to at least 20 s" in errors[0]


def test_the_templates_settings_fit_together() -> None:
    """The template passes its timeout and margin to the consumer; its defaults leave
    room to work, and its smallest timeout is accepted with a smaller margin."""
    template = load_template()
    parameters = template["Parameters"]
    variables = template["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"]
    assert variables[ENV_TIMEOUT_SECONDS] == {"Ref": "ConsumerTimeoutSeconds"}
    assert variables[ENV_SAFETY_MARGIN_SECONDS] == {"Ref": "ConsumerSafetyMarginSeconds"}
    timeout, margin = (
        parameters["ConsumerTimeoutSeconds"],
        parameters["ConsumerSafetyMarginSeconds"],
    )
    assert timeout["Default"] - margin["Default"] >= MIN_WORKING_SECONDS
    assert timeout["MinValue"] - margin["MinValue"] >= MIN_WORKING_SECONDS
