"""What the waits behaviour tests (test_waits_release_steps.py, test_waits_signals.py,
test_waits_tokens.py, test_waits_runs.py) share: draining until nothing is left, the
count a maintenance pass published, and an exception's qualified name as a failure
records it. Each file keeps its own ``Handlers``; which worker drains does not matter to
waits (test_worker.py holds both kinds), so the sync one does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from runlane_sqs import Runlane
from runlane_sqs.engine.reports import PassReport
from tests.behaviour.worker_support import drain


def qualified(error: type[BaseException]) -> str:
    return f"{error.__module__}.{error.__qualname__}"


def drain_all(app: Runlane, concurrency: int = 1) -> int:
    """Drain until a drain executes nothing (releases and resumes publish new wakeups while
    draining)."""
    total = 0
    while executed := drain(app, concurrency=concurrency):
        total += executed
    return total


def published(report: PassReport) -> int:
    """How many wakeups the pass published, over all its jobs."""
    return sum(job.published for job in report.jobs.values())


def throttle_once(app: Runlane, monkeypatch: pytest.MonkeyPatch, attribute: str) -> list[str]:
    """Make DynamoDB throttle the first ``UpdateItem`` that names ``attribute`` (after
    botocore's own retries, as the store sees it); returns the keys of the writes refused
    so (one at most), for the test to check that it happened."""
    client = app.store.dynamodb  # type: ignore[attr-defined]
    send = client.update_item
    refused: list[str] = []

    def throttled_once(**request: Any) -> Any:
        if not refused and attribute in json.dumps(request.get("ExpressionAttributeNames", {})):
            refused.append(request["Key"]["pk"]["S"])
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                "UpdateItem",
            )
        return send(**request)

    monkeypatch.setattr(client, "update_item", throttled_once)
    return refused
