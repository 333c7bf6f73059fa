"""What follows a run reaching a terminal status: its keys are freed, a first batch of
the runs waiting for it resume (maintenance polls for the rest), its ordering key's
turn is handed on and its group moves on (maintenance checks both too)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Run, finishing_needs_storage, keys_to_release
from runlane_sqs.engine.driver import EngineCall
from runlane_sqs.engine.groups import Groups
from runlane_sqs.engine.ordering import Turns
from runlane_sqs.engine.resuming import RESUME_BATCH, Resumer
from runlane_sqs.ports.keys import KeyStore

log = logging.getLogger("runlane_sqs")


@dataclass(frozen=True, slots=True)
class Finish(EngineCall):
    """Free a finished run's keys and resume its first waiters
    (:meth:`Finisher.after_finished`). Result: ``None``."""

    run: Run


class Finisher:
    """Frees a finished run's keys, resumes the runs waiting for it and hands its
    ordering key's turn on."""

    def __init__(self, keys: KeyStore, resumer: Resumer, turns: Turns, groups: Groups) -> None:
        self._keys = keys
        self._resumer = resumer
        self._turns = turns
        self._groups = groups

    def after_finished(self, run: Run) -> None:
        """Free the run's keys, resume a first batch of its waiters and wake the next run
        of its ordering key (best effort: maintenance repairs what is left)."""
        if not finishing_needs_storage(run):
            return
        self.release_keys(run)
        if run.ordering_key is not None and run.is_terminal:
            try:
                self._turns.hand_on(run.ordering_key)
            except RunlaneError as exc:
                log.warning(
                    "handing the turn of ordering key %r on after run %s failed: %s",
                    run.ordering_key,
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task},
                )
        if run.group_id is not None and run.is_terminal:
            try:
                self._groups.after_child(run)
            except RunlaneError as exc:
                log.warning(
                    "moving group %s on after its child %s finished failed (maintenance "
                    "does it): %s",
                    run.group_id,
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task, "group_id": run.group_id},
                )
        if run.watched:
            try:
                self._resumer.resume_waiters(self._resumer.run_finished(run), limit=RESUME_BATCH)
            except RunlaneError as exc:
                log.warning(
                    "resuming runs waiting for %s failed: %s",
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task},
                )

    def release_keys(self, run: Run) -> None:
        """Free the keys a finished run no longer holds (idempotency: only on failure).

        Best effort: a key left behind is taken over by the next trigger that finds its
        owner finished, so a failure here is logged, not raised."""
        for kind, key in keys_to_release(run):
            try:
                self._keys.release_key(kind, run.task, key, run.id)
            except RunlaneError as exc:
                log.warning(
                    "could not release %s key of run %s: %s",
                    kind.value,
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task},
                )
