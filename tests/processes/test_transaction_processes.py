"""The crash window of a transactional trigger, with a real producer process: killed
after DynamoDB committed its transaction and before it published the run's wakeup, the
run is found by the next maintenance pass, published, and executes once
(docs/transactions.md, "The crash window")."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.engine.reports import JOB_DUE
from tests.apps.transaction_producer import register
from tests.emulators import REPO_ROOT, queue_counts, queue_url, subprocess_env

pytestmark = pytest.mark.integration
STARTUP_TIMEOUT = 60.0


def test_a_producer_killed_between_the_commit_and_the_publish_loses_no_run(
    make_app: Callable[..., Runlane],
    backend_env: dict[str, str],
    orders: str,
    dynamodb: Any,
    sqs: Any,
) -> None:
    app = register(make_app())
    app.provision()
    with subprocess.Popen(
        [sys.executable, "-m", "tests.apps.transaction_producer", orders, "o-1"],
        cwd=REPO_ROOT,
        env=subprocess_env(backend_env),
        stdout=subprocess.PIPE,
        text=True,
    ) as producer:
        try:
            assert producer.stdout is not None
            line = producer.stdout.readline()  # blocks until the commit (or the exit)
        finally:
            producer.send_signal(signal.SIGKILL)
            producer.wait(STARTUP_TIMEOUT)
    assert line.startswith("committed "), f"the producer said {line!r}"
    run_id = line.split()[1]

    stored = dynamodb.get_item(TableName=orders, Key={"id": {"S": "o-1"}}, ConsistentRead=True)
    assert "Item" in stored
    assert app.runs.get(run_id).status is RunStatus.QUEUED
    counts = queue_counts(sqs, queue_url(sqs, app))
    assert counts["visible"] + counts["delayed"] + counts["in_flight"] == 0  # never published

    report = app.maintenance.run_pass()
    assert report.jobs[JOB_DUE].published == 1
    assert app.worker(concurrency=1).drain() == 1
    done = app.runs.get(run_id)
    assert (done.status, done.attempt) == (RunStatus.SUCCEEDED, 1)
    assert done.result == {"shipped": "o-1", "attempt": 1}
