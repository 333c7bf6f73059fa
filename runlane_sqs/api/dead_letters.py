"""Dead-letter queues that lead somewhere: ``app.dead_letters`` reads the messages of a
queue's dead-letter queue, says for each what the run it names needs
(:mod:`runlane_sqs.core.dead_letters`), and redrives them: a fresh wakeup for a run that
is runnable, nothing for one storage already settles, the message itself back to its
queue for another environment's (docs/operations.md, "Dead-letter queues").

Reading a dead letter takes it from its queue for a moment (SQS has no peek): ``list``
makes what it read visible again at once; ``redrive`` deletes what it acted on and makes
the rest visible again. Each read counts as a receive of the message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runlane_sqs.core.dead_letters import Judgement, Verdict, judge
from runlane_sqs.core.errors import ConfigurationError, RunlaneError
from runlane_sqs.core.model import Run
from runlane_sqs.core.names import check_queue
from runlane_sqs.core.redaction import shortened
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.transport import DeadLetter, DeadLetterQueues

log = logging.getLogger("runlane_sqs.dead_letters")
HOLD = timedelta(seconds=30)
"""How long a read hides the dead letters it took from other readers (it returns them
sooner)."""
MOST = 1000
"""The most dead letters one call reads."""


@dataclass(frozen=True, slots=True)
class DeadLetterState:
    """One dead letter: the message, the run it names, and what redriving it does."""

    queue: str
    message_id: str
    sent_at: datetime | None
    receive_count: int
    run_id: str | None
    """The run the wakeup names (``None``: the message is not a wakeup)."""
    environment: str | None
    status: str | None
    """The run's status in storage (``None``: not a wakeup of this environment, or no
    such run)."""
    verdict: Verdict
    reason: str
    body: str
    """The message's body, cut to 500 characters."""

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "message_id": self.message_id,
            "sent_at": self.sent_at.isoformat() if self.sent_at else None,
            "receive_count": self.receive_count,
            "run_id": self.run_id,
            "environment": self.environment,
            "status": self.status,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "body": self.body,
        }


@dataclass
class RedriveReport:
    """What one redrive did, letter by letter (``dry_run``: what it would do)."""

    queue: str
    dry_run: bool
    letters: list[DeadLetterState] = field(default_factory=list)
    """Each letter read, with its verdict."""
    redriven: int = 0
    """Runs sent a fresh wakeup (their letters deleted)."""
    settled: int = 0
    """Letters deleted: storage already settles their runs."""
    returned: int = 0
    """Letters of another environment sent back to the queue (and deleted)."""
    dropped: int = 0
    """Unreadable letters deleted (only when asked)."""
    left: int = 0
    """Letters left in the dead-letter queue."""

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "dry_run": self.dry_run,
            "redriven": self.redriven,
            "settled": self.settled,
            "returned": self.returned,
            "dropped": self.dropped,
            "left": self.left,
            "letters": [letter.to_json() for letter in self.letters],
        }


Letters = list[DeadLetter]
"""(``DeadLettersApi.list`` hides the built-in name inside the class.)"""
States = list[DeadLetterState]


class DeadLettersApi:
    """``app.dead_letters``: read a queue's dead-letter queue and redrive it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self, queue: str = "default", limit: int = 10) -> States:
        """Up to ``limit`` dead letters of ``queue`` with their runs and verdicts; they are
        made visible again at once."""
        transport, letters = self._take(queue, limit)
        try:
            return [self._state(letter)[0] for letter in letters]
        finally:
            transport.return_dead_letters(letters)

    def redrive(
        self,
        queue: str = "default",
        limit: int = 100,
        *,
        dry_run: bool = False,
        drop_unreadable: bool = False,
    ) -> RedriveReport:
        """Act on up to ``limit`` dead letters of ``queue`` by their verdicts: a fresh
        wakeup for a runnable run, nothing for a settled one, the message back to its
        queue for another environment (each letter then deleted). Letters that are not
        wakeups, or name no run here, are left (deleted with ``drop_unreadable``). With
        ``dry_run`` nothing is sent or deleted."""
        transport, letters = self._take(queue, limit)
        report = RedriveReport(check_queue(queue), dry_run)
        done: list[DeadLetter] = []
        try:
            for letter in letters:
                state, run, judgement = self._state(letter)
                report.letters.append(state)
                if not dry_run and self._act(
                    transport, letter, state, run, judgement, drop_unreadable
                ):
                    done.append(letter)
                    self._count(report, state.verdict)
        finally:
            transport.delete_dead_letters(done)
            transport.return_dead_letters([letter for letter in letters if letter not in done])
        report.left = len(letters) - len(done)
        return report

    def _take(self, queue: str, limit: int) -> tuple[DeadLetterQueues, Letters]:
        transport = self._engine.transport
        if not isinstance(transport, DeadLetterQueues):
            raise ConfigurationError("this app's transport has no dead-letter queues")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MOST:
            raise ConfigurationError(f"limit is a whole number from 1 to {MOST}, not {limit!r}")
        letters = transport.take_dead_letters(check_queue(queue), limit, HOLD)
        if letters is None:
            raise ConfigurationError(f"queue {queue!r} has no dead-letter queue")
        return transport, letters

    def _state(self, letter: DeadLetter) -> tuple[DeadLetterState, Run | None, Judgement]:
        engine = self._engine
        wakeup: Wakeup | None
        try:
            wakeup = parse_wakeup(letter.body)
        except MalformedWakeup:
            wakeup = None
        here = wakeup is not None and wakeup.environment == engine.config.environment
        run = engine.store.get_run(wakeup.run_id) if here and wakeup else None
        judgement = judge(
            wakeup, run, environment=engine.config.environment, now=engine.clock.now()
        )
        state = DeadLetterState(
            queue=letter.queue,
            message_id=letter.message_id,
            sent_at=letter.sent_at,
            receive_count=letter.receive_count,
            run_id=wakeup.run_id if wakeup else None,
            environment=wakeup.environment if wakeup else None,
            status=run.status.value if run else None,
            verdict=judgement.verdict,
            reason=judgement.reason,
            body=shortened(letter.body, 500),
        )
        return state, run, judgement

    def _act(
        self,
        transport: DeadLetterQueues,
        letter: DeadLetter,
        state: DeadLetterState,
        run: Run | None,
        judgement: Judgement,
        drop_unreadable: bool,
    ) -> bool:
        """Do what ``state``'s verdict says; whether the letter may be deleted."""
        verdict = state.verdict
        extra = {"run_id": state.run_id, "message_id": state.message_id}
        if verdict is Verdict.REDRIVE:
            assert run is not None
            try:
                sent = self._engine.publisher.publish_many([run], delay=judgement.delay)
            except RunlaneError as exc:
                log.warning("redriving run %s failed: %s", run.id, exc, extra=extra)
                return False
            log.info(
                "redrove run %s from the dead-letter queue of %r", run.id, letter.queue, extra=extra
            )
            return sent == 1
        if verdict is Verdict.FOREIGN:
            transport.resend(letter)
            return True
        if verdict is Verdict.SETTLED:
            log.info("dead letter of run %s deleted: %s", state.run_id, state.reason, extra=extra)
            return True
        return drop_unreadable

    @staticmethod
    def _count(report: RedriveReport, verdict: Verdict) -> None:
        if verdict is Verdict.REDRIVE:
            report.redriven += 1
        elif verdict is Verdict.SETTLED:
            report.settled += 1
        elif verdict is Verdict.FOREIGN:
            report.returned += 1
        else:
            report.dropped += 1
