"""Waking released runs: signals, token decisions and finished runs resume their waiters.

Waiters are found on the waits index, each is re-read and resumed by a conditional
write (a waiter that moved on meanwhile is skipped), and their wakeups are published in
batches. Anything missed here (the index lags writes by a moment) is caught by
maintenance, which polls runs waiting on tokens and runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runlane_sqs.core import tokens as core_tokens
from runlane_sqs.core import waits
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError
from runlane_sqs.core.groups import Group
from runlane_sqs.core.machine import Skip
from runlane_sqs.core.model import JSON, EventType, Run, Wait, WaitKind
from runlane_sqs.core.redaction import digest
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine.context import RunOutcome
from runlane_sqs.engine.driver import EngineCall
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.values import Kept, Values
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.resume")
RESUME_BATCH = 25
"""Waiters resumed at once by a token decision or a finishing run; maintenance resumes
the rest in batches."""
WAITERS_PAGE_SIZE = 25
"""Waiting runs asked for in one page of the waits index."""


@dataclass(frozen=True, slots=True)
class Recheck(EngineCall):
    """Resume a run released to wait if its target decided meanwhile
    (:meth:`Resumer.recheck`). Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class Resumption:
    """What a wait's target decided, as written into each waiter."""

    kind: WaitKind
    target: str
    result: JSON
    """The wait's result, opened: each waiter keeps it sealed for its own wait."""
    event: EventType
    data: dict[str, JSON]
    trace: str | None = None
    """The context of the span that decided the target (a token's decision, a signal's
    send): the waiters' wakeups carry it, so each next attempt links to it."""
    kept: Kept | None = None
    """``result`` as every waiter keeps it, when one sealing serves them all (an app
    without codecs binds no value to its place; a large result is then one object);
    ``None``: sealed for each waiter's wait."""


@dataclass(frozen=True, slots=True)
class ResumeReport:
    resumed: int
    more: bool
    """Waiters may remain beyond the limit."""


class Resumer:
    """Writes a target's decision into the runs waiting for it and publishes their wakeups."""

    def __init__(
        self,
        store: RunStore,
        publisher: Publisher,
        values: Values,
        clock: Clock,
        config: RunlaneConfig,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._values = values
        self._clock = clock
        self._config = config

    def resume_one(self, run: Run, resumption: Resumption) -> Run | None:
        """Resume ``run`` at its current wait if it still waits for this target."""
        waiting = run.waiting
        if waiting is None or waiting.kind is not resumption.kind:
            return None
        if waiting.target != resumption.target:
            return None
        decision = waits.resume(
            run,
            wait=waiting,
            result=self._kept(resumption, run, waiting),
            event=resumption.event,
            data=resumption.data,
            now=self._clock.now(),
            republish=self._config.republish,
        )
        if isinstance(decision, Skip):
            return None
        try:
            return self._store.apply(decision)
        except ConflictError:
            return None

    def _kept(self, resumption: Resumption, run: Run, waiting: Wait) -> JSON:
        """The target's result as ``run``'s wait keeps it: sealed for that wait."""
        if resumption.kept is not None:
            return resumption.kept.value
        place = ValuePlace(Holder.RUN, run.id, ValueField.WAIT, waiting.name)
        return self._values.seal(resumption.result, what=place.what, place=place).value

    def resume_waiters(self, resumption: Resumption, limit: int | None) -> ResumeReport:
        """Resume up to ``limit`` waiters (all of them with ``None``) and publish their
        wakeups."""
        resumed: list[Run] = []
        examined = 0
        cursor: str | None = None
        while limit is None or examined < limit:
            page = WAITERS_PAGE_SIZE if limit is None else min(WAITERS_PAGE_SIZE, limit - examined)
            ids, cursor = self._store.waiting_runs(resumption.kind, resumption.target, page, cursor)
            examined += len(ids)
            for run_id in ids:
                run = self._store.get_run(run_id)
                stored = self.resume_one(run, resumption) if run is not None else None
                if stored is not None:
                    resumed.append(stored)
            if cursor is None or not ids:
                break
        if resumed:
            self._publisher.publish_many(resumed, trace=resumption.trace)
            log.info(
                "resumed %d run(s) waiting on %s %s",
                len(resumed),
                resumption.kind.value,
                digest(resumption.target),  # a token id is a bearer secret
            )
        return ResumeReport(resumed=len(resumed), more=cursor is not None)

    def target_resumption(self, waiting: Wait) -> Resumption | None:
        """The resumption for a token, run or group wait whose target has decided (a
        group: is complete), else ``None``."""
        if waiting.target is None:
            return None
        if waiting.kind is WaitKind.TOKEN:
            token = self._store.tokens.get_token(waiting.target)
            decided = token is not None and token.is_decided
            return self.token_resumption(token) if token is not None and decided else None
        if waiting.kind is WaitKind.RUN:
            other = self._store.get_run(waiting.target)
            finished = other is not None and other.is_terminal
            return self.run_finished(other) if other is not None and finished else None
        if waiting.kind is WaitKind.GROUP:
            group = self._store.groups.get_group(waiting.target)
            return group_resumption(group) if group is not None and group.closed else None
        return None

    def run_finished(self, run: Run) -> Resumption:
        """What a finished run writes into the runs waiting for it (its result opened,
        and the outcome sealed again: a large result is kept once more, as the wait's)."""
        opened = self._values.open(run.result, ValuePlace(Holder.RUN, run.id, ValueField.RESULT))
        outcome = RunOutcome.of(run.with_changes(result=opened)).to_json()
        return Resumption(
            kind=WaitKind.RUN,
            target=run.id,
            result=outcome,
            event=EventType.RESUMED,
            data={"run": run.id, "status": run.status.value},
            kept=self._values.seal_unbound(outcome, what=f"outcome of run {run.id}"),
        )

    def token_resumption(self, token: Token) -> Resumption:
        """What a decided token writes into the runs waiting for it (its value opened,
        and the wait's result sealed again)."""
        result, event, data = core_tokens.wait_result(self._values.open_token(token))
        kept = self._values.seal_unbound(result, what="token result")
        return Resumption(WaitKind.TOKEN, token.id, result, event, data, token.decision_trace, kept)

    def recheck(self, run: Run) -> None:
        """A token decided (or a run finished) just before this run's release was written
        may have resumed waiters without seeing this one: look once more, resume it if so."""
        if run.waiting is None:
            return
        resumption = self.target_resumption(run.waiting)
        if resumption is not None:
            resumed = self.resume_one(run, resumption)
            if resumed is not None:
                self._publisher.publish_many([resumed], trace=resumption.trace)


def group_resumption(group: Group) -> Resumption:
    """What a complete group writes into its parent's wait: its counts (the children's
    results stay in the children)."""
    return Resumption(
        kind=WaitKind.GROUP,
        target=group.id,
        result=group.summary(),
        event=EventType.RESUMED,
        data={"group": group.id, "status": group.status.value},
    )
