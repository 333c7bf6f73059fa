"""A handler in a worker process on the moto server reports its progress 1,000 times in
10 s; this test's process reads the run meanwhile and sees it advance. Every DynamoDB
request of the worker goes through a proxy that counts them: the run item receives at
most 6 progress writes (one at once, then one per 2 s), and the last report is on the
outcome's own write, with no request of its own (docs/progress.md)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from tests.apps.progress_worker import REPORT, register
from tests.emulators import WorkerProcess
from tests.faults import Drops, fault_proxy

APP = "tests.apps.progress_worker:app"
REPORTS = 1_000
SECONDS = 10.0
FINISH_SECONDS = 60


class Counting(Drops):
    """Forwards everything and keeps each DynamoDB ``UpdateItem`` body."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[dict[str, Any]] = []

    def drops(self, target: str, body: bytes) -> bool:
        if target.endswith(".UpdateItem"):
            with self.lock:
                self.updates.append(json.loads(body))
        return False

    def names(self, request: dict[str, Any]) -> set[str]:
        return set(request.get("ExpressionAttributeNames", {}).values())

    def reports(self) -> list[dict[str, Any]]:
        """Writes of a report alone: progress or state, no ``seq`` (no event)."""
        with self.lock:
            updates = list(self.updates)
        return [u for u in updates if "seq" not in self.names(u) and self.names(u) & {"progress"}]

    def outcomes_with_progress(self) -> list[dict[str, Any]]:
        with self.lock:
            updates = list(self.updates)
        return [u for u in updates if {"seq", "status", "progress"} <= self.names(u)]


@pytest.mark.integration
@pytest.mark.parametrize("flags", [(), ("--async",)], ids=["sync", "async"])
def test_a_worker_process_reports_1000_times_in_10_s_with_at_most_6_writes(
    make_app: Callable[..., Runlane],
    start_worker: Callable[..., WorkerProcess],
    backend_env: dict[str, str],
    flags: tuple[str, ...],
) -> None:
    app = register(make_app())
    app.provision()
    run = app.trigger(REPORT, {"reports": REPORTS, "seconds": SECONDS})
    counting = Counting()
    seen: list[tuple[int, str]] = []
    lags: dict[int, float] = {}
    """Seconds from each report the reader saw to when it first saw it (same host)."""
    done = threading.Event()

    def read_meanwhile() -> None:
        """The other process's reader: one strongly consistent read every 0.2 s."""
        while not done.is_set():
            stored = app.runs.get(run.id)
            progress = stored.progress
            if progress is not None:
                seen.append((int(progress.done), stored.status.value))
                if progress.at is not None and stored.status.value == "running":
                    lag = (datetime.now(UTC) - progress.at).total_seconds()
                    lags.setdefault(int(progress.done), lag)
            done.wait(0.2)

    # DynamoDB's own endpoint where the backend names one (DynamoDB Local beside LocalStack)
    upstream = backend_env.get("AWS_ENDPOINT_URL_DYNAMODB") or backend_env["AWS_ENDPOINT_URL"]
    with fault_proxy(upstream, counting) as proxy:
        worker = start_worker(
            "--app", APP, "--drain", *flags, extra_env={"AWS_ENDPOINT_URL_DYNAMODB": proxy}
        )
        reader = threading.Thread(target=read_meanwhile, daemon=True)
        reader.start()
        try:
            assert worker.wait(timeout=FINISH_SECONDS) == 0, worker.log()
        finally:
            done.set()
            reader.join(5)

    finished = app.runs.get(run.id)
    assert finished.status is RunStatus.SUCCEEDED, worker.log()
    assert finished.progress is not None
    assert (finished.progress.done, finished.progress.total) == (REPORTS, REPORTS)
    assert finished.state == {"reports": REPORTS}
    running = [done for done, status in seen if status == "running"]
    assert len(set(running)) >= 3, seen  # it advanced while the handler ran
    assert running == sorted(running)
    reports = counting.reports()
    assert 1 <= len(reports) <= 6, [r["ExpressionAttributeValues"] for r in reports]
    assert len(counting.outcomes_with_progress()) == 1  # the last report, at no extra request
    ordered = sorted(lags.values())
    p50, p95 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.95)]
    print(
        f"{flags}: {len(reports)} progress writes for {REPORTS} reports in {SECONDS:g} s; "
        f"report to reader (polling every 0.2 s) p50 {p50:.2f} s, p95 {p95:.2f} s"
    )
    assert p95 < 2.0 + 0.2 + 1.0  # the interval, the reader's poll, and slack
