"""Reading runs: ``app.runs``."""

from __future__ import annotations

from runlane_sqs.core.model import Run, RunEvent
from runlane_sqs.errors import RunNotFound
from runlane_sqs.ports import RunStore


class RunsApi:
    """Look up runs and their history."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def get(self, run_id: str) -> Run:
        """The run as stored now; raises :class:`~runlane_sqs.errors.RunNotFound`."""
        run = self._store.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    def events(self, run_id: str) -> list[RunEvent]:
        """The run's history, ordered by sequence (1, 2, 3, ...)."""
        events = self._store.get_events(run_id)
        if not events:
            raise RunNotFound(run_id)
        return sorted(events, key=lambda e: e.seq)
