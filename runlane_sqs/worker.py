"""The long-running worker: receive wakeups, execute attempts in a thread pool.

``run()`` works until :meth:`Worker.stop` or SIGTERM/SIGINT; ``drain()`` processes the
work available now and returns. Shutdown is cooperative: stop receiving, set every
in-flight attempt's cancellation event, wait up to the grace period, leave anything
unfinished to lease expiry.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING

from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.errors import ConfigurationError, MissingResourceError, RunlaneError
from runlane_sqs.executor import Executor
from runlane_sqs.leases import LeaseKeeper
from runlane_sqs.limits import MAX_RECEIVE_BATCH, MAX_SEND_BATCH, MAX_WAIT_TIME_SECONDS
from runlane_sqs.outcomes import Disposition
from runlane_sqs.ports import ReceivedWakeup

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

log = logging.getLogger("runlane_sqs.worker")
ACK_LINGER_SECONDS = 2.0
"""Longest a handled message waits for its batch delete while other attempts run."""


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


class _Pool:
    """Daemon threads, so a handler that ignores cancellation cannot block process exit."""

    def __init__(self, size: int, target: Callable[[], None]) -> None:
        self.threads = [
            threading.Thread(target=target, name=f"runlane-worker-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self.threads:
            thread.start()


class Worker:
    """Consumes wakeups from ``queues`` with ``concurrency`` handler threads."""

    def __init__(
        self,
        app: Runlane,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        wait_seconds: int = 10,
        grace_period: Duration = 25,
        worker_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if not 0 <= wait_seconds <= MAX_WAIT_TIME_SECONDS:
            raise ConfigurationError(f"wait_seconds must be between 0 and {MAX_WAIT_TIME_SECONDS}")
        chosen = tuple(queues) if queues else tuple(app.tasks.queues() or ["default"])
        self.app = app
        self.config = WorkerConfig(
            queues=chosen,
            concurrency=concurrency,
            wait_seconds=wait_seconds,
            grace_period=to_timedelta(grace_period, "grace_period"),
            worker_id=worker_id or f"worker-{uuid.uuid4().hex[:12]}",
        )
        self.leases = LeaseKeeper(app.store, app.clock, app.config.lease_duration)
        self.executor = Executor(app, self.config.worker_id, self.leases)
        self._stopping = threading.Event()
        self._work: queue.Queue[ReceivedWakeup | None] = queue.Queue()
        self._buffer: deque[ReceivedWakeup] = deque()
        self._acks: list[ReceivedWakeup] = []
        self._done = threading.Condition()
        self._busy = 0
        self._executed = 0
        self._pool: _Pool | None = None
        self._next_queue = 0
        self._oldest_ack = 0.0
        self._fatal: MissingResourceError | None = None
        self._prefetch = min(MAX_RECEIVE_BATCH, 2 * concurrency)
        """Messages asked for per receive: ten, or fewer for small pools, which would
        otherwise hold messages they cannot start before the visibility timeout."""

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def _extra(self) -> dict[str, str]:
        """Log context of this worker's own lines."""
        return {"worker_id": self.config.worker_id}

    # public API -------------------------------------------------------------------

    def run(self) -> None:
        """Work until :meth:`stop` is called or the process gets SIGTERM/SIGINT."""
        previous = self._install_signal_handlers()
        try:
            log.info(
                "worker %s consuming %s",
                self.worker_id,
                ", ".join(self.config.queues),
                extra=self._extra,
            )
            self._loop(max_runs=None, drain=False)
        finally:
            self._shutdown()
            self._restore_signal_handlers(previous)

    def drain(self, max_runs: int | None = None) -> int:
        """Process the work available now and return how many runs were executed.

        Stale, foreign and malformed wakeups are deleted but do not count. Returns when a
        receive finds nothing and no attempt is in flight, or after ``max_runs`` runs.
        """
        if max_runs is not None and max_runs < 1:
            raise ConfigurationError("max_runs must be at least 1")
        self._stopping.clear()
        self._fatal = None
        try:
            self._loop(max_runs=max_runs, drain=True)
        finally:
            self._shutdown()
        return self._executed

    def stop(self) -> None:
        """Stop receiving and ask in-flight attempts to finish (safe from any thread)."""
        if not self._stopping.is_set():
            log.info("worker %s stopping", self.worker_id, extra=self._extra)
        self._stopping.set()
        self.leases.cancel_all()

    # the loop ---------------------------------------------------------------------

    def _start(self) -> None:
        if self._pool is None:
            self._pool = _Pool(self.config.concurrency, self._consume)
        self.leases.start()

    def _loop(self, *, max_runs: int | None, drain: bool) -> None:
        self._start()
        self._executed = 0
        while not self._stopping.is_set():
            self._flush_acks()
            if self._fatal is not None:
                break
            if max_runs is not None and self._executed + self._busy >= max_runs:
                if self._busy == 0:
                    break
                self._wait_for_completion()
            elif self._buffer and self._busy < self.config.concurrency:
                self._dispatch(self._buffer.popleft())
            elif not self._ready_to_receive():
                self._wait_for_completion()
            elif not self._fill(drain):
                if self._busy == 0 and drain:
                    break
                self._wait_for_completion()
        if self._fatal is not None:
            raise self._fatal

    def _ready_to_receive(self) -> bool:
        """Receive when idle, or when at least half the slots are free: a receive asks
        for ten messages anyway, so under a backlog receives stay one per ten runs."""
        if self._buffer:
            return False
        free = self.config.concurrency - self._busy
        return self._busy == 0 or free >= max(
            1, min(MAX_RECEIVE_BATCH, self.config.concurrency) // 2
        )

    def _fill(self, drain: bool) -> bool:
        """Receive into the local buffer; False when nothing was available."""
        queues = self.config.queues
        wait = self.config.drain_wait_seconds if drain else self.config.wait_seconds
        if self._busy:
            wait = 0
        elif len(queues) > 1:
            wait = min(wait, 1)
        for _ in range(len(queues)):
            name = queues[self._next_queue % len(queues)]
            self._next_queue += 1
            try:
                messages = self.app.transport.receive(name, self._prefetch, wait)
            except MissingResourceError:
                raise
            except RunlaneError as exc:
                log.warning("receive from %r failed: %s", name, exc, extra=self._extra)
                self._stopping.wait(1.0)
                continue
            if self._stopping.is_set():
                self.app.transport.release(messages)
                return False
            if messages:
                self._buffer.extend(messages)
                return True
        return False

    def _dispatch(self, message: ReceivedWakeup) -> None:
        with self._done:
            self._busy += 1
        self._work.put(message)

    def _wait_for_completion(self) -> None:
        with self._done:
            if self._busy:
                self._done.wait(timeout=1.0)

    def _consume(self) -> None:
        while True:
            message = self._work.get()
            if message is None:
                return
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
                self._finished(message, disposition)

    def _finished(self, message: ReceivedWakeup, disposition: Disposition) -> None:
        with self._done:
            self._busy -= 1
            if disposition is Disposition.EXECUTED:
                self._executed += 1
            if disposition is not Disposition.DEFERRED:
                if not self._acks:
                    self._oldest_ack = time.monotonic()
                self._acks.append(message)
            self._done.notify_all()

    def _flush_acks(self, *, force: bool = False) -> None:
        """Delete handled messages in batches of ten; sooner when idle or when the oldest
        has waited ``ACK_LINGER_SECONDS``."""
        with self._done:
            if not self._acks:
                return
            due = (
                force
                or self._busy == 0
                or len(self._acks) >= MAX_SEND_BATCH
                or time.monotonic() - self._oldest_ack >= ACK_LINGER_SECONDS
            )
            if not due:
                return
            acks, self._acks = self._acks, []
        self.app.transport.ack(acks)

    def _shutdown(self) -> None:
        if self._buffer:
            self.app.transport.release(list(self._buffer))
            self._buffer.clear()
        if self._busy:
            self.leases.cancel_all()
            deadline = self.config.grace_period.total_seconds()
            with self._done:
                self._done.wait_for(lambda: self._busy == 0, timeout=deadline)
            if self._busy:
                log.warning(
                    "%d attempt(s) still running after the grace period; their leases will "
                    "expire and maintenance will make the runs runnable again",
                    self._busy,
                    extra=self._extra,
                )
        self._flush_acks(force=True)
        self.leases.stop()
        if self._pool is not None:
            for _ in self._pool.threads:
                self._work.put(None)
            self._pool = None

    # signals ----------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, object] | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        previous: dict[int, object] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name, extra=self._extra)
        self.stop()

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, object] | None) -> None:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
