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
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Unpack

from runlane_sqs.core.errors import MissingResourceError, RunlaneError
from runlane_sqs.engine.engine import Engine, HasEngine, engine_of
from runlane_sqs.engine.outcomes import Disposition
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.executor import Executor
from runlane_sqs.runtime.leases import LeaseKeeper
from runlane_sqs.runtime.pacing import Intake, Step, WorkerBase, WorkerOptions
from runlane_sqs.runtime.receiving import Receiver

log = logging.getLogger("runlane_sqs.worker")


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
        engine = engine_of(app)
        super().__init__(engine, queues, **options)
        self.leases = LeaseKeeper(engine.store, engine.clock, engine.config.lease_duration)
        self.executor = Executor(engine, self.config.worker_id, self.leases)
        self._stopping = threading.Event()
        self._done = threading.Condition()
        """Guards ``_intake``; notified when an attempt finishes."""
        self._intake = Intake(self.config)
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
            self._intake = Intake(self.config)
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
                step = intake.step(max_runs)
            if step is Step.STOP:
                break
            if step is Step.DISPATCH:
                self._dispatch()
                continue
            idle = intake.busy == 0  # nothing in flight can publish during the receive
            if step is Step.WAIT or not self._fill(drain):
                if step is Step.RECEIVE and idle and intake.busy == 0 and drain:
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
        wait = self.config.receive_wait(drain=drain, busy=intake.busy)
        for name in intake.receive_order():
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
            if messages is None:  # stopped during a long poll: it was not waited out
                return False
            if self._stopping.is_set():
                self.engine.transport.release(messages)
                return False
            if messages:
                intake.buffer.extend(messages)
                return True
        return False

    def _receive(self, name: str, wait: int) -> list[ReceivedWakeup] | None:
        """Receive on the receiver's thread until messages come or the worker stops
        (``None``: the open poll is abandoned and what it brings is released)."""
        receipt = self._receiver.receive(name, self.config.prefetch, wait)
        receipt.add_done_callback(self._notify)
        with self._done:
            self._done.wait_for(lambda: receipt.done() or self._stopping.is_set())
        if not receipt.done():
            self._receiver.abandon(receipt)
            return None
        return receipt.result()

    def _dispatch(self) -> None:
        assert self._pool is not None
        with self._done:
            message = self._intake.start_next()
        self._pool.jobs.put(message)

    def _wait_for_completion(self) -> None:
        with self._done:
            if self._intake.busy:
                self._done.wait(timeout=1.0)

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
        intake = self._intake
        unstarted = intake.take_buffer()
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
        self.leases.stop()
        self._receiver.close()
        self.engine.observer.flush()  # buffered spans and metrics, before the process ends
        with self._done:
            if self._pool is not None:
                self._pool.close()
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
        if self._stopping.is_set():
            self._exit_now(signum, self.leases.run_ids())
        log.info("received %s", signal.Signals(signum).name, extra=self._extra)
        self.stop()

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, object] | None) -> None:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
