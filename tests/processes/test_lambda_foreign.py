"""The Lambda consumer and wakeups of other environments (issue 13, item 1): a record of
another environment is reported, so Lambda does not delete it and it comes back, after
the queue's visibility timeout, for that environment's consumer; the shared queue is
warned about once per function instance. Queue names follow the environment by default.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.lambdas.consumer import logical_queue, sqs_handler
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.testing import InMemoryRunStore, ManualClock

SHARED_ARN = "arn:aws:sqs:us-east-1:123456789012:shared-default"
TASK = "lambda_foreign.work"


class Context:
    """A Lambda context with a minute left."""

    aws_request_id = "req"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def record(message: ReceivedWakeup) -> dict[str, Any]:
    return {
        "messageId": message.message_id,
        "receiptHandle": message.receipt,
        "body": message.body,
        "attributes": {"ApproximateReceiveCount": str(message.receive_count)},
        "md5OfBody": hashlib.md5(message.body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": SHARED_ARN,
    }


def reported(response: Any) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def app_of(environment: str, transport: InMemoryTransport, clock: ManualClock) -> Runlane:
    """An app of ``environment`` whose queues are the shared ones (``shared-{queue}``)."""
    app = Runlane(
        environment=environment,
        clock=clock,
        store=InMemoryRunStore(environment),
        transport=transport,
        queue_prefix="shared-",
    )
    app.task(lambda ctx, payload: payload, name=TASK)
    return app


def test_a_record_of_another_environment_is_reported_never_deleted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    transport = InMemoryTransport(clock)
    prod, staging = app_of("prod", transport, clock), app_of("staging", transport, clock)
    runs = [staging.trigger(TASK, {"n": n}) for n in range(2)]
    messages = transport.receive("default", 10, 0)
    prod_handler = sqs_handler(prod)

    with caplog.at_level(logging.INFO, logger="runlane_sqs"):
        first = prod_handler({"Records": [record(messages[0])]}, Context())
        second = prod_handler({"Records": [record(m) for m in messages]}, Context())

    assert reported(first) == [messages[0].message_id]
    assert reported(second) == [m.message_id for m in messages]
    assert [staging.runs.get(run.id).status for run in runs] == [RunStatus.QUEUED] * 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per function instance, not per invocation or record
    assert warnings[0].startswith(
        "queue shared-default receives wakeups of environment 'staging'; "
        "this worker's environment is 'prod'"
    )
    summaries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch of")]
    assert summaries[-1] == (
        "batch of 2 record(s): 0 executed, 0 skipped, 2 reported (2 of other environments)"
    )

    clock.advance(timedelta(minutes=1))  # the visibility timeout: SQS delivers them again
    again = transport.receive("default", 10, 0)
    response = sqs_handler(staging)({"Records": [record(m) for m in again]}, Context())

    assert reported(response) == []
    assert [staging.runs.get(run.id).status for run in runs] == [RunStatus.SUCCEEDED] * 2


def test_queue_names_of_the_default_prefix_carry_the_environment() -> None:
    clock = ManualClock()
    app = Runlane(
        environment="prod",
        clock=clock,
        store=InMemoryRunStore("prod"),
        transport=InMemoryTransport(clock),
    )

    assert app.config.sqs_queue_name("emails") == "runlane-prod-emails"
    assert logical_queue(app, "arn:aws:sqs:us-east-1:1:runlane-prod-emails") == "emails"
    assert logical_queue(app, "arn:aws:sqs:us-east-1:1:runlane-emails") == "runlane-emails"
