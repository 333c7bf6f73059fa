"""Reading and controlling runs: ``app.runs``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from runlane_sqs.core import machine
from runlane_sqs.core.model import Run, RunEvent
from runlane_sqs.errors import ConflictError, RunlaneError, RunNotFound

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

log = logging.getLogger("runlane_sqs.runs")
MAX_CONFLICTS = 5


class RunsApi:
    """Look up runs and their history; cancel them."""

    def __init__(self, app: Runlane) -> None:
        self._app = app

    def get(self, run_id: str) -> Run:
        """The run as stored now; raises :class:`~runlane_sqs.errors.RunNotFound`."""
        run = self._app.store.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    def events(self, run_id: str) -> list[RunEvent]:
        """The run's history, ordered by sequence (1, 2, 3, ...)."""
        events = self._app.store.get_events(run_id)
        if not events:
            raise RunNotFound(run_id)
        return sorted(events, key=lambda e: e.seq)

    def cancel(self, run_id: str, *, reason: str = "", actor: str = "operator") -> Run:
        """Cancel a run: a waiting one becomes ``cancelled`` at once; a running one becomes
        ``cancel_requested`` and its worker sets the handler's cancellation event at the
        next heartbeat. Raises :class:`~runlane_sqs.errors.IllegalTransition` for a
        finished run (a success that won the race stays a success)."""
        run = self.get(run_id)
        for _ in range(MAX_CONFLICTS):
            transition = machine.request_cancel(
                run, now=self._app.clock.now(), actor=actor, reason=reason
            )
            try:
                stored = self._app.store.apply(transition)
            except ConflictError as conflict:
                if conflict.current is None:
                    raise RunNotFound(run_id) from None
                run = conflict.current
                continue
            log.info(
                "run %s: %s by %s",
                run_id,
                stored.status.value,
                actor,
                extra={"run_id": run_id, "task": stored.task},
            )
            self._app.after_finished(stored)
            return stored
        raise RunlaneError(f"run {run_id} kept changing; cancel it again")
