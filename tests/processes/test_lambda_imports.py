"""What the Lambda entry points import: the consumer starts (its module, the app, the
handler) and runs a batch of sync tasks without importing what it does not use
(docs/deploy-lambda.md, "Cold start"), no entry point imports the command line, the
extras, the async adapters or the local server, and ``import runlane_sqs`` imports none
of its modules (its top-level names are imported on first use). Each check runs in a
fresh interpreter; none times anything (``python -m bench --only coldstart`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.processes.test_lambda_package import CLI_ONLY, ENTRY_POINTS, EXTRAS

NEVER_ON_LAMBDA = (
    *CLI_ONLY,
    *EXTRAS,
    "runlane_sqs.cli",
    "runlane_sqs.local",
    "runlane_sqs.aio",
    "runlane_sqs.runtime.aio",
    "runlane_sqs.adapters.dynamodb.aio",
    "runlane_sqs.adapters.sqs.aio",
    "runlane_sqs.adapters.threaded",
    "runlane_sqs.runtime.worker",
    "runlane_sqs.adapters.provision",
)
"""Not imported by any Lambda entry point: the command line, the extras, the local
server, the async adapters and worker, the long-running worker, provisioning."""
NOT_ON_THE_CONSUMER_PATH = (
    *NEVER_ON_LAMBDA,
    "asyncio",  # async handlers only
    "cronsim",  # schedules only
    "zoneinfo",
    "runlane_sqs.engine.maintenance",  # the maintenance function's
    "runlane_sqs.engine.parking",
    "runlane_sqs.engine.scheduling",
    "runlane_sqs.api.runs",  # app.runs and the other operator APIs, on first use
    "runlane_sqs.api.queues",
    "runlane_sqs.api.schedules",
)
"""Also not imported, nor run, by the consumer's cold start and a batch of sync tasks
(docs/deploy-lambda.md, "Cold start")."""

# A consumer handler module as docs/deploy-lambda.md writes it; then one batch, with the
# app moved to in-memory storage. Prints the modules loaded after each.
CONSUMER_CHILD = """
import json, sys

from runlane_sqs import Runlane
from runlane_sqs.lambdas.consumer import sqs_handler

app = Runlane.from_env()


@app.task(name="hello")
def hello(ctx, payload):
    return f"hello, {payload}"


handler = sqs_handler(app)
imported = sorted(sys.modules)

from runlane_sqs.testing import use_in_memory

use_in_memory(app)


class Context:
    def get_remaining_time_in_millis(self):
        return 60_000


run = app.trigger("hello", "Ada")
event = {"Records": [
    {"messageId": m.message_id, "receiptHandle": m.receipt, "body": m.body,
     "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
     "eventSource": "aws:sqs",
     "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:runlane-test-default"}
    for m in app.transport.receive("default", 10, 0)
]}
response = handler(event, Context())
print(json.dumps({
    "imported": imported,
    "handled": sorted(sys.modules),
    "response": response,
    "status": app.store.get_run(run.id).status,
}))
"""


def modules_after(code: str) -> Any:
    """The JSON report ``code`` prints in a fresh interpreter with a Lambda's variables."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "RUNLANE_TABLE": "runlane"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def among(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``loaded`` that are one of ``names`` or inside one of them."""
    return [m for m in loaded if any(m == n or m.startswith(f"{n}.") for n in names)]


def test_the_consumer_starts_and_runs_a_batch_without_what_it_does_not_use() -> None:
    report = modules_after(CONSUMER_CHILD)
    assert report["response"] == {"batchItemFailures": []}
    assert report["status"] == "succeeded"
    assert "runlane_sqs.lambdas.consumer" in report["imported"]
    assert "boto3" in report["imported"]  # the clients' SDK: needed, and counted
    assert among(report["imported"], NOT_ON_THE_CONSUMER_PATH) == []
    assert among(report["handled"], NOT_ON_THE_CONSUMER_PATH) == []


def test_the_package_itself_imports_none_of_its_modules() -> None:
    """Its top-level names are imported on first use: ``import runlane_sqs.lambdas.x``
    loads what ``x`` needs and no more."""
    code = "import json, sys, runlane_sqs; print(json.dumps({'loaded': sorted(sys.modules)}))"
    loaded = modules_after(code)["loaded"]
    assert among(loaded, ("runlane_sqs",)) == ["runlane_sqs"]
    assert among(loaded, ("boto3", "botocore", "pynamodb")) == []


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_no_entry_point_imports_what_no_lambda_uses(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps({{'loaded': sorted(sys.modules)}}))"
    assert among(modules_after(code)["loaded"], NEVER_ON_LAMBDA) == []
