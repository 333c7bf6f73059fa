"""Payloads and results that JSON cannot store faithfully are refused with the library's
own error, on every backend and with both workers.

A payload with a lone surrogate (``"\\ud800"``: a string with no UTF-8 form) or nested
deeper than 64 levels fails ``trigger`` with ``InvalidPayloadError`` saying what and
where, and stores and publishes nothing. A handler (or a step) that returns such a value
fails its run at once, without retry, with ``InvalidPayloadError`` as the failure's
type: the same as a result that is not JSON at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from runlane_sqs import InvalidPayloadError, Runlane, RunStatus, TaskContext
from runlane_sqs.core.values import MAX_JSON_DEPTH
from tests.backends import Backend
from tests.behaviour.worker_support import RETRY_AT_ONCE
from tests.workers import WorkerKind

RETURNS = "bad_payloads.returns"
STEPS = "bad_payloads.steps"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


TOO_DEEP = f"is nested deeper than {MAX_JSON_DEPTH} levels"
BAD_VALUES: dict[str, tuple[Any, str]] = {
    "a lone surrogate": ({"note": "caf\ud800"}, "contains a lone surrogate (U+D800) in $.note"),
    "a surrogate in a key": ({"k\udfff": 1}, "contains a lone surrogate (U+DFFF) in a key of $"),
    "1,000 levels deep": (nested(1000), f"is nested deeper than {MAX_JSON_DEPTH} levels"),
    "65 levels deep": (
        nested(MAX_JSON_DEPTH + 1),
        f"is nested deeper than {MAX_JSON_DEPTH} levels",
    ),
}


class Calls:
    """Handlers that return (or record as a step) the value named by the payload."""

    def __init__(self) -> None:
        self.attempts: list[int] = []

    def returns(self, ctx: TaskContext, payload: Any) -> Any:
        self.attempts.append(ctx.attempt)
        return BAD_VALUES[payload["case"]][0]

    def steps(self, ctx: TaskContext, payload: Any) -> Any:
        self.attempts.append(ctx.attempt)
        return ctx.step("bad", lambda: BAD_VALUES[payload["case"]][0])

    def register(self, app: Runlane) -> None:
        app.task(self.returns, name=RETURNS, retry=RETRY_AT_ONCE)
        app.task(self.steps, name=STEPS, retry=RETRY_AT_ONCE)


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def app(backend: Backend, calls: Calls) -> Runlane:
    return backend.app(register=calls.register)


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_trigger_with_a_bad_payload_fails_clearly_and_stores_nothing(
    case: str, app: Runlane, backend: Backend
) -> None:
    value, phrase = BAD_VALUES[case]

    with pytest.raises(InvalidPayloadError) as refused:
        app.trigger(RETURNS, value)
    with pytest.raises(InvalidPayloadError):
        app.trigger_many(RETURNS, [{"case": "fine"}, value])

    assert str(refused.value).startswith(f"payload {phrase}")
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_signal_with_a_bad_payload_is_refused(case: str, app: Runlane) -> None:
    value, phrase = BAD_VALUES[case]
    with pytest.raises(InvalidPayloadError) as refused:
        app.signals.send("order-7", value)
    assert str(refused.value).startswith(f"signal payload {phrase}")


@pytest.mark.parametrize("task", [RETURNS, STEPS])
@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_bad_result_fails_the_run_without_retry(
    case: str, task: str, app: Runlane, calls: Calls, worker_kind: WorkerKind
) -> None:
    run = app.trigger(task, {"case": case})

    assert worker_kind.drain(app) == 1
    assert worker_kind.drain(app) == 0

    assert calls.attempts == [1]
    final = app.runs.get(run.id)
    assert (final.status, final.result) == (RunStatus.FAILED, None)
    assert final.failure is not None
    assert final.failure.retryable is False
    assert final.failure.type == "runlane_sqs.errors.InvalidPayloadError"
    assert BAD_VALUES[case][1] in final.failure.message
