"""Maintenance on a timer, as the EventBridge schedule runs it (every minute in a
deployment; every few seconds here): ``app.maintenance.run_pass()`` in a thread, its
app's DynamoDB and SQS requests counted."""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from types import TracebackType

from runlane_sqs import Runlane
from runlane_sqs.engine.reports import PassReport
from tests.emulators import count_requests

DEFAULT_PERIOD_SECONDS = 2.5


class MaintenanceLoop:
    """Passes of ``app``'s maintenance every ``period_seconds`` until :meth:`stop`; use an
    app of its own, so that only maintenance's requests are counted."""

    def __init__(self, app: Runlane, period_seconds: float = DEFAULT_PERIOD_SECONDS) -> None:
        self.app = app
        self.period_seconds = period_seconds
        self.requests = {s: count_requests(app.client(s)) for s in ("dynamodb", "sqs")}
        self.reports: list[PassReport] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maintenance", daemon=True)

    def _run(self) -> None:
        """A pass every period, at a fixed rate as a schedule fires (a pass that overruns
        its period is followed at once by the next, never overlapped)."""
        next_pass = time.monotonic() + self.period_seconds
        while not self._stopping.wait(max(0.0, next_pass - time.monotonic())):
            next_pass += self.period_seconds
            try:
                self.reports.append(self.app.maintenance.run_pass())
            except Exception as exc:  # reported by the test
                self.errors.append(repr(exc))

    def published(self) -> Counter[str]:
        """Wakeups published, by job, over every pass so far."""
        total: Counter[str] = Counter()
        for report in self.reports:
            for job, job_report in report.jobs.items():
                total[job] += job_report.published
        return total

    def median_pass_seconds(self) -> float:
        durations = [r.duration_ms / 1000 for r in self.reports]
        return statistics.median(durations) if durations else 0.0

    def start(self) -> MaintenanceLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=120)

    def __enter__(self) -> MaintenanceLoop:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
