"""The workers: what the sync and the async worker share, and the sync worker itself.

``run()`` works until :meth:`Worker.stop` or SIGTERM/SIGINT; ``drain()`` processes the
work available now and returns. Shutdown is cooperative: stop receiving, make every
message received and not started visible again, set every in-flight attempt's
cancellation event, wait up to the grace period, leave anything unfinished to lease
expiry.

Both workers pace receives, dispatches and deletes by the same pure decisions
(:class:`WorkerConfig`, :func:`next_action`, :class:`Intake`) and differ only in how they
wait and send. The sync worker's threads are here too: its handler pool and the receiver
(a daemon thread, so a receive that never returns cannot keep the process); its heartbeat
thread is the executor's (:class:`~runlane_sqs.runtime.executor.LeaseKeeper`, which the
Lambda consumer uses as well). An idle
worker spends its time in SQS long polls (10 s by default). SQS keeps a poll open until
it returns, even once the process that sent it has exited, and gives it what arrives
meanwhile: so a stopping worker waits for the poll it is in (at most its wait, plus
:data:`OPEN_POLL_MARGIN_SECONDS`) and makes what it brings visible again at once, as it
does with every message it received and did not start (buffered, or held for its run's
reserved start).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from heapq import heappop, heappush
from itertools import count
from types import FrameType
from typing import NoReturn, TypedDict, Unpack

from runlane_sqs.core.clock import Clock, Duration, SystemClock, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, MissingResourceError, RunlaneError
from runlane_sqs.core.limits import (
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    MAX_WAIT_TIME_SECONDS,
)
from runlane_sqs.core.options import option_names, refuse_unknown
from runlane_sqs.core.wakeup import START_MARK, held_until
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.engine import Engine, HasEngine
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.engine.rates import MAX_EARLY
from runlane_sqs.ports.transport import ReceivedWakeup, WakeupTransport
from runlane_sqs.runtime.executor import Executor, LeaseKeeper
from runlane_sqs.runtime.protection import ENV_AGENT, protection_from_env

log = logging.getLogger("runlane_sqs.worker")

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
    """Long-poll wait; also about the longest a stop waits for a receive in progress."""
    weights: tuple[int, ...] = ()
    """Each queue's weight, in ``queues``' order (:meth:`Intake.receive_order`)."""
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
        weights: Mapping[str, int] | None = None,
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
            weights=queue_weights(queues, weights or {}),
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


MAX_QUEUE_WEIGHT = 100


def queue_weights(queues: Sequence[str], weights: Mapping[str, int]) -> tuple[int, ...]:
    """Each queue's weight in ``queues``' order (1 unless ``weights`` names it)."""
    unknown = sorted(set(weights) - set(queues))
    if unknown:
        raise ConfigurationError(
            f"weights name queues this worker does not consume: {', '.join(unknown)}"
        )
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ConfigurationError(f"queue {name!r}: a weight is a whole number, not {weight!r}")
        if not 1 <= weight <= MAX_QUEUE_WEIGHT:
            raise ConfigurationError(
                f"queue {name!r}: a weight is from 1 to {MAX_QUEUE_WEIGHT}, not {weight}"
            )
    return tuple(weights.get(name, 1) for name in queues)


class LoopAction(StrEnum):
    """What a worker's loop does next."""

    STOP = "stop"
    """``max_runs`` reached and nothing in flight."""
    WAIT = "wait"
    """Wait for an attempt to finish."""
    DISPATCH = "dispatch"
    """Start an attempt for the next buffered message."""
    RECEIVE = "receive"
    """Receive more messages."""


def next_action(
    config: WorkerConfig, *, busy: int, buffered: int, executed: int, max_runs: int | None
) -> LoopAction:
    """Receive when idle, or when at least half the slots are free: a receive asks for
    ten messages anyway, so under a backlog receives stay one per ten runs."""
    if max_runs is not None and executed + busy >= max_runs:
        return LoopAction.STOP if busy == 0 else LoopAction.WAIT
    if buffered:
        return LoopAction.DISPATCH if busy < config.concurrency else LoopAction.WAIT
    free = config.concurrency - busy
    half = max(1, min(MAX_RECEIVE_BATCH, config.concurrency) // 2)
    return LoopAction.RECEIVE if busy == 0 or free >= half else LoopAction.WAIT


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


OPEN_POLL_MARGIN_SECONDS = 5.0
"""How long past its wait a stopping worker waits for the receive it is in to return, so
that it can make what the receive brings visible again. A receive that takes longer is
left (both workers), and whatever it brings comes back at the end of its visibility
timeout unless the sync worker's process is still there to hand it back."""


HOLD_LEAD = timedelta(milliseconds=200)
"""How long before its run's reserved start a held wakeup is handed to a thread: the run
is read first, and the thread waits what is left (docs/rate-limits.md, "How exact")."""


class Intake:
    """The bookkeeping of one worker session, without I/O or locks: messages received
    but not started (and those held until their run's reserved start), attempts in
    flight, handled messages waiting for their delete, wakeups of other environments to
    make visible again."""

    def __init__(
        self,
        config: WorkerConfig,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.buffer: deque[ReceivedWakeup] = deque()
        self._timed: list[tuple[datetime, int, ReceivedWakeup]] = []
        """Wakeups received before their run's reserved start (a heap): those due at one
        moment in the order they were held."""
        self._holds = count()
        self._clock = clock or SystemClock()
        self.busy = 0
        self.executed = 0
        self.returned = 0
        """Wakeups of other environments returned to their queue (never deleted)."""
        self._acks: list[ReceivedWakeup] = []
        self._releases: list[ReceivedWakeup] = []
        self._held: list[tuple[float, ReceivedWakeup]] = []
        self._returned_ids: set[str] = set()
        self._oldest_ack = 0.0
        self._credit = [0] * len(config.queues)
        self._monotonic = monotonic
        self.closed = False
        """Set by :meth:`close`: the session ends and keeps no message from then on."""

    def add(self, messages: Sequence[ReceivedWakeup]) -> None:
        """Buffer received messages. One whose hint names a reserved start a moment ahead
        (see :data:`~runlane_sqs.engine.rates.EARLY_WAKEUP`) is held until just before
        it, no thread tied up waiting."""
        for message in messages:
            until = held_until(message.body) if START_MARK in message.body else None
            if until is not None and self._early(until):
                self.hold(message, until)
            else:
                self.buffer.append(message)

    def _early(self, until: datetime) -> bool:
        """Whether a wakeup for a start at ``until`` came early enough to hold."""
        now = self._clock.now()
        return now < until - HOLD_LEAD and until <= now + MAX_EARLY

    def hold(self, message: ReceivedWakeup, until: datetime) -> bool:
        """Keep ``message`` (in flight, its attempt ending as ``HELD``) and hand it to a
        thread again just before ``until``. False once the intake is closed: no loop
        will hand it out, so the caller hands it back to its queue at once."""
        if self.closed:
            return False
        heappush(self._timed, (until - HOLD_LEAD, next(self._holds), message))
        return True

    @property
    def pending(self) -> int:
        """Attempts in flight and messages held: while any, a receive does not long-poll
        and a drain is not over."""
        return self.busy + len(self._timed)

    def wait_timeout(self) -> float:
        """How long the loop may wait for an attempt to finish: a second, or until the
        next held message's reserved start."""
        if not self._timed:
            return 1.0
        return min(1.0, max(0.0, (self._timed[0][0] - self._clock.now()).total_seconds()))

    def _release_due(self) -> None:
        """Held messages whose reserved start has come go first: their runs start within a
        grace of it or reserve again (docs/rate-limits.md)."""
        if not self._timed:
            return
        now = self._clock.now()
        due = []
        while self._timed and self._timed[0][0] <= now:
            due.append(heappop(self._timed)[2])
        self.buffer.extendleft(reversed(due))

    def next_action(self, max_runs: int | None) -> LoopAction:
        self._release_due()
        return next_action(
            self.config,
            busy=self.busy,
            buffered=len(self.buffer),
            executed=self.executed,
            max_runs=max_runs,
        )

    def receive_order(self) -> list[str]:
        """The queues to try in the next receive: first the one whose turn it is by
        weight (smooth weighted round robin: in every run of ``sum(weights)`` receives,
        a queue of weight ``w`` is tried first ``w`` times, spread out), then the others
        after it, so a queue with nothing to receive passes its turn on. Equal weights
        take turns, one further each time."""
        queues, weights = self.config.queues, self.config.weights
        credit = [c + w for c, w in zip(self._credit, weights, strict=True)]
        first = max(range(len(queues)), key=lambda i: (credit[i], -i))
        credit[first] -= sum(weights)
        self._credit = credit
        return [queues[(first + k) % len(queues)] for k in range(len(queues))]

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
        elif disposition not in (Disposition.DEFERRED, Disposition.HELD):
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

    def close(self) -> list[ReceivedWakeup]:
        """End the session's keeping: the messages received and never started, buffered
        or held for their run's reserved start, to make visible again at once. A hold
        asked for later is refused (:meth:`hold`)."""
        self.closed = True
        unstarted = [*self.buffer, *(message for _, _, message in self._timed)]
        self.buffer.clear()
        self._timed.clear()
        return unstarted


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
    weights: Mapping[str, int] | None
    """How often each queue is polled first, against the others (default 1 each): with
    ``{"high": 3}`` and every queue full, about three runs of ``high`` start for one of
    each other queue; a queue with nothing waiting passes its turn on
    (docs/operations.md, "Queue weights")."""


WORKER_OPTIONS = option_names(WorkerOptions)


class WorkerBase:
    """What the sync and the async worker share: the engine, the configuration and the
    worker's identity in logs."""

    def __init__(
        self,
        app: Engine | HasEngine,
        queues: Sequence[str] | None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        if options.keys() - WORKER_OPTIONS:
            refuse_unknown(options, WORKER_OPTIONS, "worker")
        engine = self.engine = app if isinstance(app, Engine) else app.engine
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


# The sync worker ----------------------------------------------------------------------


class _Pool:
    """The handler threads and job queue of one ``run()`` or ``drain()``.

    Daemon threads, so a handler that ignores cancellation cannot block process exit. A
    pool is never reused: an attempt abandoned at shutdown keeps its thread, and the next
    session starts with a pool and a count of its own.
    """

    def __init__(self, size: int, handle: Callable[[_Pool, ReceivedWakeup], None]) -> None:
        self.jobs: queue.SimpleQueue[ReceivedWakeup | None] = queue.SimpleQueue()
        self.threads = [
            threading.Thread(
                target=self._work, args=(handle,), name=f"runlane-worker-{i}", daemon=True
            )
            for i in range(size)
        ]
        for thread in self.threads:
            thread.start()

    def _work(self, handle: Callable[[_Pool, ReceivedWakeup], None]) -> None:
        while (message := self.jobs.get()) is not None:
            handle(self, message)

    def close(self) -> None:
        """Let each thread exit once it is idle."""
        for _ in self.threads:
            self.jobs.put(None)


class Worker(WorkerBase):
    """Consumes wakeups from ``queues`` with ``concurrency`` handler threads."""

    def __init__(
        self,
        app: Engine | HasEngine,
        queues: Sequence[str] | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        super().__init__(app, queues, **options)
        engine = self.engine
        self.leases = LeaseKeeper(
            engine.store,
            engine.clock,
            engine.config.lease_duration,
            engine.config.progress_interval,
        )
        protection = protection_from_env() if os.environ.get(ENV_AGENT) else None
        if protection is not None:  # on ECS: no scale-in while attempts are in flight
            self.leases.occupancy = protection.set
        path = MessagePath.of(engine, self.config.worker_id)
        self.executor = Executor(engine, self.leases, path, hold=self._hold)
        self._stopping = threading.Event()
        self._done = threading.Condition()
        """Guards ``_intake``; notified when an attempt finishes."""
        self._intake = Intake(self.config, clock=engine.clock)
        self._receiver = Receiver(engine.transport)
        self._pool: _Pool | None = None
        self._fatal: MissingResourceError | None = None

    # public API -------------------------------------------------------------------

    def run(self) -> None:
        """Work until :meth:`stop` is called or the process gets SIGTERM/SIGINT."""
        previous = self._install_signal_handlers()
        try:
            self._log_start("worker")
            self._start_unparking()
            self._loop(max_runs=None, drain=False)
        finally:
            self._shutdown()
            self._restore_signal_handlers(previous)

    def drain(self, max_runs: int | None = None) -> int:
        """Process the work available now and return how many runs were executed.

        Stale and malformed wakeups are deleted, wakeups of other environments returned to
        their queue (:attr:`returned`); neither counts. Returns when a receive finds
        nothing and no attempt is in flight, or after ``max_runs`` runs.
        Raises the transport's error when a receive fails (after the AWS SDK's own
        retries): whether work is available is then unknown.
        """
        self._check_max_runs(max_runs)
        self._stopping.clear()
        self._fatal = None
        try:
            self._loop(max_runs=max_runs, drain=True)
        finally:
            self._shutdown()
        return self._intake.executed

    def stop(self) -> None:
        """Stop receiving and ask in-flight attempts to finish (safe from any thread)."""
        if not self._stopping.is_set():
            log.info("worker %s stopping", self.worker_id, extra=self._extra)
        self._stopping.set()
        self.leases.cancel_all()
        self._notify()

    def _notify(self, *_: object) -> None:
        """Wake the loop (an attempt finished, a receive completed, or a stop)."""
        with self._done:
            self._done.notify_all()

    # the loop ---------------------------------------------------------------------

    def _start(self) -> None:
        """A session: a fresh pool and intake (an attempt abandoned by an earlier one
        keeps its thread and counts nowhere)."""
        with self._done:
            self._pool = _Pool(self.config.concurrency, self._handle)
            self._intake = Intake(self.config, clock=self.engine.clock)
        self._receiver = Receiver(self.engine.transport)
        self.leases.start()

    def _loop(self, *, max_runs: int | None, drain: bool) -> None:
        self._start()
        intake = self._intake
        while not self._stopping.is_set():
            self._flush_acks()
            if self._fatal is not None:
                break
            with self._done:
                action = intake.next_action(max_runs)
            if action is LoopAction.STOP:
                break
            if action is LoopAction.DISPATCH:
                self._dispatch()
                continue
            idle = intake.pending == 0  # nothing in flight can publish during the receive
            if action is LoopAction.WAIT or not self._fill(drain):
                if action is LoopAction.RECEIVE and idle and intake.pending == 0 and drain:
                    break
                self._wait_for_completion()
        if self._fatal is not None:
            raise self._fatal

    def _fill(self, drain: bool) -> bool:
        """Receive into the intake's buffer; False when nothing was available.

        A failed receive is retried a second later, except in a drain: that cannot tell
        an empty queue from one it cannot read, so the error ends it.
        """
        intake = self._intake
        wait = self.config.receive_wait(drain=drain, busy=intake.pending)
        for name in intake.receive_order():
            if self._stopping.is_set():
                return False
            try:
                messages = self._receive(name, wait)
            except MissingResourceError:
                raise
            except RunlaneError as exc:
                if drain:
                    raise
                log.warning("receive from %r failed: %s", name, exc, extra=self._extra)
                self._stopping.wait(1.0)
                continue
            if messages is None:  # the stop outlasted the open receive's wait: left
                return False
            if self._stopping.is_set():  # what the open receive brought after the stop
                self.engine.transport.release(messages)
                return False
            if messages:
                with self._done:  # attempts hold messages in the intake too
                    intake.add(messages)
                return True
        return False

    def _receive(self, name: str, wait: int) -> list[ReceivedWakeup] | None:
        """Receive on the receiver's thread. A stop waits for the receive to return (SQS
        would give what arrives to the open poll even after this process exits), at most
        ``wait`` and :data:`OPEN_POLL_MARGIN_SECONDS` more; ``None`` if it has not
        returned by then: the receive is left, and what it brings is released if the
        process is still there."""
        receipt = self._receiver.receive(name, self.config.prefetch, wait)
        receipt.add_done_callback(self._notify)
        with self._done:
            self._done.wait_for(lambda: receipt.done() or self._stopping.is_set())
            self._done.wait_for(receipt.done, timeout=wait + OPEN_POLL_MARGIN_SECONDS)
        if not receipt.done():
            log.warning(
                "the receive from %r did not return within %.0f s of the stop; what it "
                "brings may stay invisible until the queue's visibility timeout",
                name,
                wait + OPEN_POLL_MARGIN_SECONDS,
                extra=self._extra,
            )
            self._receiver.abandon(receipt)
            return None
        return receipt.result()

    def _dispatch(self) -> None:
        assert self._pool is not None
        with self._done:
            message = self._intake.start_next()
        self._pool.jobs.put(message)

    def _wait_for_completion(self) -> None:
        intake = self._intake
        with self._done:
            if intake.busy:
                self._done.wait(timeout=intake.wait_timeout())
                return
        if intake.pending:  # only messages held for their reserved start
            self.engine.pause(intake.wait_timeout())

    def _hold(self, message: ReceivedWakeup, until: datetime) -> bool:
        with self._done:
            return self._intake.hold(message, until)

    def _handle(self, pool: _Pool, message: ReceivedWakeup) -> None:
        disposition = Disposition.DEFERRED
        try:
            disposition = self.executor.handle(message)
        except MissingResourceError as exc:
            log.error("stopping: %s", exc, extra=self._extra)
            self._fatal = exc
            self.stop()
        except Exception:
            log.exception(
                "unexpected error handling message %s", message.message_id, extra=self._extra
            )
        finally:
            with self._done:
                if pool is self._pool:  # not an attempt abandoned by an earlier session
                    self._intake.finished(message, disposition)
                self._done.notify_all()

    @property
    def returned(self) -> int:
        """Wakeups of other environments the last ``run()`` or ``drain()`` received and
        returned to their queue, for that environment's workers."""
        return self._intake.returned

    def _flush_acks(self, *, force: bool = False) -> None:
        """Delete handled messages when due (all if ``force``: the session ends); make
        wakeups of other environments visible again (see :meth:`Intake.take_releases`)."""
        with self._done:
            acks = self._intake.take_acks(force=force)
            releases = self._intake.take_releases(ending=force)
        if acks:
            self.engine.transport.ack(acks)
        if releases:
            self.engine.transport.release(releases)

    def _shutdown(self) -> None:
        """Hand back at once every message received and not started; an attempt that
        holds its message from now on hands it back itself (:meth:`Intake.close`). Then
        let the attempts in flight finish within the grace period."""
        intake = self._intake
        with self._done:
            unstarted = intake.close()
        if unstarted:
            self.engine.transport.release(unstarted)
        if intake.busy:
            self.leases.cancel_all()
            deadline = self.config.grace_period.total_seconds()
            with self._done:
                self._done.wait_for(lambda: intake.busy == 0, timeout=deadline)
            if intake.busy:
                log.warning(
                    "%d attempt(s) still running after the grace period; their leases will "
                    "expire and maintenance will make the runs runnable again",
                    intake.busy,
                    extra=self._extra,
                )
        self._flush_acks(force=True)
        self._log_returned(intake.returned)
        self._receiver.close()
        with self._done:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
        self.leases.stop()
        self.engine.observer.flush()  # buffered spans and metrics, before the process ends

    # signals ----------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, object] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous: dict[int, object] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping.is_set():
            self._exit_now(signum, self.leases.run_ids())
        log.info("received %s", signal.Signals(signum).name, extra=self._extra)
        self.stop()

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, object] | None) -> None:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


# Its receiver thread ---------------------------------------------------

Receipt = Future[list[ReceivedWakeup]]


class Receiver:
    """One daemon thread that performs one worker session's receives, one at a time."""

    def __init__(self, transport: WakeupTransport) -> None:
        self._transport = transport
        self._requests: queue.SimpleQueue[tuple[str, int, int, Receipt] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def receive(self, queue_name: str, max_messages: int, wait_seconds: int) -> Receipt:
        """Start a receive; its future completes with the messages or the error."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="runlane-receive", daemon=True)
            self._thread.start()
        receipt: Receipt = Future()
        self._requests.put((queue_name, max_messages, wait_seconds, receipt))
        return receipt

    def abandon(self, receipt: Receipt) -> None:
        """``receipt`` was still open past the stop's wait for it: release what it brings
        if the process is still there when it returns."""
        receipt.add_done_callback(self._release)

    def close(self) -> None:
        """Let the thread end after the receive it is in (a daemon: the process need not
        wait for it). A closed receiver takes no more receives."""
        self._requests.put(None)

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            queue_name, max_messages, wait_seconds, receipt = request
            if not receipt.set_running_or_notify_cancel():
                continue
            try:
                receipt.set_result(self._transport.receive(queue_name, max_messages, wait_seconds))
            except BaseException as exc:  # handed to the waiting worker
                receipt.set_exception(exc)

    def _release(self, receipt: Receipt) -> None:
        if receipt.cancelled() or receipt.exception() is not None:
            return
        messages = receipt.result()
        if messages:
            try:
                self._transport.release(messages)
            except Exception:  # SQS makes them visible at the end of their timeout
                log.warning("could not release %d message(s) at shutdown", len(messages))
