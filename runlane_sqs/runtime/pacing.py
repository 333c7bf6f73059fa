"""How a worker paces receives, dispatches and deletes: pure decisions shared by the sync
and the async worker, which differ only in how they wait and send."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import NoReturn, TypedDict, Unpack

from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, RunlaneError
from runlane_sqs.core.limits import (
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    MAX_WAIT_TIME_SECONDS,
)
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.outcomes import Disposition
from runlane_sqs.ports.transport import ReceivedWakeup

ACK_LINGER_SECONDS = 2.0
"""Longest a handled message waits for its batch delete while other attempts run."""
ENV_WORKER_ID = "RUNLANE_WORKER_ID"
"""Names the worker (its lease owner id) when ``worker_id`` is not given."""
MAX_WORKER_ID_CHARS = 128
MAX_HOST_CHARS = 63


def default_worker_id() -> str:
    """``worker-{host}-{pid}-{random}``: the lease owner a run shows names the host and
    process working on it; the random part tells apart workers of one process (and a
    pid used again after a restart). The host name keeps letters, digits, '.' and '-'."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", socket.gethostname()).strip(".-")
    return f"worker-{host[:MAX_HOST_CHARS] or 'host'}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def choose_worker_id(worker_id: str | None) -> str:
    """``worker_id``, else ``RUNLANE_WORKER_ID``, else :func:`default_worker_id`. A given
    id must be 1 to 128 printable characters without spaces: it is stored as the lease
    owner and printed in logs and tables."""
    source = "worker_id"
    if not worker_id:
        worker_id, source = os.environ.get(ENV_WORKER_ID, ""), ENV_WORKER_ID
    if not worker_id:
        return default_worker_id()
    if (
        len(worker_id) > MAX_WORKER_ID_CHARS
        or not worker_id.isprintable()
        or any(c.isspace() for c in worker_id)
    ):
        raise ConfigurationError(
            f"{source} {worker_id!r} must be 1 to {MAX_WORKER_ID_CHARS} printable "
            "characters without spaces"
        )
    return worker_id


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process consumes its queues."""

    queues: tuple[str, ...]
    concurrency: int = 1
    wait_seconds: int = 10
    """Long-poll wait; also the longest a stop waits for a receive in progress."""
    drain_wait_seconds: int = 1
    grace_period: timedelta = timedelta(seconds=25)
    """How long a stopping worker lets in-flight attempts finish (keep under ECS stopTimeout)."""
    worker_id: str = ""

    @classmethod
    def build(
        cls,
        queues: Sequence[str],
        *,
        concurrency: int = 1,
        wait_seconds: int = 10,
        grace_period: Duration = 25,
        worker_id: str | None = None,
    ) -> WorkerConfig:
        """Validated settings; a missing ``worker_id`` comes from ``RUNLANE_WORKER_ID``
        or names the host and process (:func:`choose_worker_id`)."""
        if concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if not 0 <= wait_seconds <= MAX_WAIT_TIME_SECONDS:
            raise ConfigurationError(f"wait_seconds must be between 0 and {MAX_WAIT_TIME_SECONDS}")
        if not queues:
            raise ConfigurationError("a worker needs at least one queue")
        return cls(
            queues=tuple(queues),
            concurrency=concurrency,
            wait_seconds=wait_seconds,
            grace_period=to_timedelta(grace_period, "grace_period"),
            worker_id=choose_worker_id(worker_id),
        )

    @property
    def prefetch(self) -> int:
        """Messages asked for per receive: ten, or fewer for small pools, which would
        otherwise hold messages they cannot start before the visibility timeout."""
        return min(MAX_RECEIVE_BATCH, 2 * self.concurrency)

    def receive_wait(self, *, drain: bool, busy: int) -> int:
        """Long-poll seconds of the next receive: none while attempts run (their slots
        free up sooner), short with several queues so none is starved."""
        if busy:
            return 0
        wait = self.drain_wait_seconds if drain else self.wait_seconds
        return min(wait, 1) if len(self.queues) > 1 else wait


class Step(StrEnum):
    """What a worker's loop does next."""

    STOP = "stop"
    """``max_runs`` reached and nothing in flight."""
    WAIT = "wait"
    """Wait for an attempt to finish."""
    DISPATCH = "dispatch"
    """Start an attempt for the next buffered message."""
    RECEIVE = "receive"
    """Receive more messages."""


def next_step(
    config: WorkerConfig, *, busy: int, buffered: int, executed: int, max_runs: int | None
) -> Step:
    """Receive when idle, or when at least half the slots are free: a receive asks for
    ten messages anyway, so under a backlog receives stay one per ten runs."""
    if max_runs is not None and executed + busy >= max_runs:
        return Step.STOP if busy == 0 else Step.WAIT
    if buffered:
        return Step.DISPATCH if busy < config.concurrency else Step.WAIT
    free = config.concurrency - busy
    half = max(1, min(MAX_RECEIVE_BATCH, config.concurrency) // 2)
    return Step.RECEIVE if busy == 0 or free >= half else Step.WAIT


def acks_due(pending: int, *, busy: int, oldest_age_seconds: float, force: bool = False) -> bool:
    """Delete handled messages in batches of ten; sooner when idle or when the oldest has
    waited ``ACK_LINGER_SECONDS``."""
    if not pending:
        return False
    return (
        force or busy == 0 or pending >= MAX_SEND_BATCH or oldest_age_seconds >= ACK_LINGER_SECONDS
    )


RETURNED_IDS_KEPT = 10_000
"""Wakeups of other environments a worker session remembers having returned; past
this it forgets them all and starts again."""
HELD_SECONDS = DEFAULT_VISIBILITY_TIMEOUT_SECONDS
"""How long a held wakeup of another environment stays invisible: the queue's visibility
timeout (60 s unless the queue was created with another); released at the end of the
session only while younger than this."""


class Intake:
    """The bookkeeping of one worker session, without I/O or locks: messages received
    but not started, attempts in flight, handled messages waiting for their delete,
    wakeups of other environments to make visible again."""

    def __init__(
        self, config: WorkerConfig, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.buffer: deque[ReceivedWakeup] = deque()
        self.busy = 0
        self.executed = 0
        self.returned = 0
        """Wakeups of other environments returned to their queue (never deleted)."""
        self._acks: list[ReceivedWakeup] = []
        self._releases: list[ReceivedWakeup] = []
        self._held: list[tuple[float, ReceivedWakeup]] = []
        self._returned_ids: set[str] = set()
        self._oldest_ack = 0.0
        self._next_queue = 0
        self._monotonic = monotonic

    def step(self, max_runs: int | None) -> Step:
        return next_step(
            self.config,
            busy=self.busy,
            buffered=len(self.buffer),
            executed=self.executed,
            max_runs=max_runs,
        )

    def receive_order(self) -> list[str]:
        """The queues to try in the next receive, starting one further each time."""
        queues = self.config.queues
        start = self._next_queue % len(queues)
        self._next_queue += 1
        return [*queues[start:], *queues[:start]]

    def start_next(self) -> ReceivedWakeup:
        """Take the next buffered message for an attempt."""
        self.busy += 1
        return self.buffer.popleft()

    def finished(self, message: ReceivedWakeup, disposition: Disposition) -> None:
        self.busy -= 1
        if disposition is Disposition.EXECUTED:
            self.executed += 1
        if disposition is Disposition.RETURNED:
            self._return(message)
        elif disposition is not Disposition.DEFERRED:
            if not self._acks:
                self._oldest_ack = self._monotonic()
            self._acks.append(message)

    def take_acks(self, *, force: bool = False) -> list[ReceivedWakeup]:
        """The handled messages to delete now (see :func:`acks_due`), if any."""
        age = self._monotonic() - self._oldest_ack
        if not acks_due(len(self._acks), busy=self.busy, oldest_age_seconds=age, force=force):
            return []
        acks, self._acks = self._acks, []
        return acks

    def _return(self, message: ReceivedWakeup) -> None:
        """A wakeup of another environment is made visible again at once. If this session
        already returned it, it is held: left invisible until its visibility timeout or
        the end of the session, so the worker does not take it again and again (every
        receive counts toward the dead-letter queue) while that environment's workers
        could have it."""
        self.returned += 1
        if message.message_id in self._returned_ids:
            self._held.append((self._monotonic(), message))
            return
        if len(self._returned_ids) >= RETURNED_IDS_KEPT:
            self._returned_ids.clear()
        self._returned_ids.add(message.message_id)
        self._releases.append(message)

    def take_releases(self, *, ending: bool = False) -> list[ReceivedWakeup]:
        """The wakeups of other environments to make visible again now: those returned
        for the first time and, when the session is ``ending``, those held (unless their
        visibility timeout has already made them visible)."""
        releases, self._releases = self._releases, []
        since = self._monotonic() - HELD_SECONDS
        self._held = [(at, m) for at, m in self._held if at > since]
        if ending:
            releases, self._held = [*releases, *(m for _, m in self._held)], []
        return releases

    def take_buffer(self) -> list[ReceivedWakeup]:
        """Received messages never started (to make visible again)."""
        unstarted = list(self.buffer)
        self.buffer.clear()
        return unstarted


log = logging.getLogger("runlane_sqs.worker")


class WorkerOptions(TypedDict, total=False):
    """The options both workers take (see :meth:`WorkerConfig.build`)."""

    concurrency: int
    """Attempts at once (default 1)."""
    wait_seconds: int
    """Long-poll seconds of an idle receive (default 10)."""
    grace_period: Duration
    """How long a stopping worker lets attempts finish (default 25 s)."""
    worker_id: str | None
    """This worker's lease owner name (default: ``RUNLANE_WORKER_ID``, or
    ``worker-{host}-{pid}-{random}``)."""


class WorkerBase:
    """What the sync and the async worker share: the engine, the configuration and the
    worker's identity in logs."""

    def __init__(
        self, engine: Engine, queues: Sequence[str] | None, **options: Unpack[WorkerOptions]
    ) -> None:
        self.engine = engine
        self.config = WorkerConfig.build(queues or engine.tasks.queues() or ["default"], **options)

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def _extra(self) -> dict[str, str]:
        """Log context of this worker's own lines."""
        return {"worker_id": self.config.worker_id}

    def _log_start(self, kind: str) -> None:
        log.info(
            "%s %s consuming %s",
            kind,
            self.worker_id,
            ", ".join(self.config.queues),
            extra=self._extra,
        )

    def _exit_now(self, signum: int, run_ids: Sequence[str]) -> NoReturn:
        """A second SIGTERM/SIGINT while stopping: exit at once with ``128 + signum``,
        naming the runs whose attempts are abandoned (their leases expire and
        maintenance makes them runnable again)."""
        name = signal.Signals(signum).name
        if run_ids:
            log.warning(
                "second %s: exiting now; %d run(s) left to lease expiry: %s",
                name,
                len(run_ids),
                ", ".join(run_ids),
                extra={**self._extra, "run_ids": list(run_ids)},
            )
        else:
            log.warning("second %s: exiting now", name, extra=self._extra)
        logging.shutdown()  # flush the handlers: os._exit skips it
        os._exit(128 + signum)

    def _start_unparking(self) -> None:
        """At start, on a daemon thread (the worker does not wait for it): unpark parked
        runs of tasks this worker registers on the queues it consumes."""
        threading.Thread(target=self._unpark_known, name="runlane-unpark", daemon=True).start()

    def _unpark_known(self) -> None:
        """A failure is logged; maintenance unparks the runs later."""
        try:
            self.engine.parking.unpark_known(by=self.worker_id, queues=self.config.queues)
        except RunlaneError as exc:
            log.warning("could not look for parked runs: %s", exc, extra=self._extra)

    def _log_returned(self, returned: int) -> None:
        """At the end of a session: how many wakeups of other environments it returned."""
        if returned:
            log.info(
                "returned %d wakeup(s) of other environments to their queues",
                returned,
                extra={**self._extra, "returned": returned},
            )

    @staticmethod
    def _check_max_runs(max_runs: int | None) -> None:
        if max_runs is not None and max_runs < 1:
            raise ConfigurationError("max_runs must be at least 1")
