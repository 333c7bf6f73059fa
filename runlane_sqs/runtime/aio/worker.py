"""The asyncio worker: the sync :class:`~runlane_sqs.runtime.worker.Worker`'s loop and pacing on
an event loop, with aiobotocore for DynamoDB and SQS.

``async def`` handlers run on the loop, as many at once as ``concurrency`` allows; sync
handlers run on a pool of ``concurrency`` daemon threads. ``await worker.run()`` works
until :meth:`AsyncWorker.stop` or SIGTERM/SIGINT; ``await worker.drain()`` processes the
work available now and returns. Shutdown is cooperative, as in the sync worker: stop
receiving (waiting for the receive in progress, whose messages are made visible again),
hand back every message received and not started, set every in-flight attempt's
cancellation, wait up to the grace period; then cancel what is left (``asyncio``
cancellation) and leave those runs to lease expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Sequence
from contextlib import AsyncExitStack, suppress
from typing import Any, Protocol, Unpack

from runlane_sqs.adapters.aws import AwsClients
from runlane_sqs.core.errors import MissingResourceError, RunlaneError
from runlane_sqs.core.rates import ClaimLead
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.engine import HasEngine
from runlane_sqs.engine.message import ForeignEnvironments, MessagePath
from runlane_sqs.ports.aio import AsyncWakeupTransport
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.aio.backend import open_ports
from runlane_sqs.runtime.aio.executor import AsyncExecutor, pause_on_loop
from runlane_sqs.runtime.aio.leases import AsyncLeaseKeeper
from runlane_sqs.runtime.aio.threads import DaemonThreads
from runlane_sqs.runtime.protection import ENV_AGENT, protection_from_env
from runlane_sqs.runtime.worker import (
    OPEN_POLL_MARGIN_SECONDS,
    Intake,
    LoopAction,
    WorkerBase,
    WorkerOptions,
)


class AsyncHost(HasEngine, Protocol):
    """What the async worker runs on: an engine and the AWS clients its adapters came
    from (the ``Runlane`` app is one)."""

    @property
    def aws(self) -> AwsClients: ...


log = logging.getLogger("runlane_sqs.worker")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CANCEL_WAIT_SECONDS = 5.0
"""How long a stopping worker waits for attempts it cancelled after the grace period."""


class _Session:
    """What one ``run()`` or ``drain()`` opens: adapters, heartbeats, the executor, a
    pool of handler threads and the intake's bookkeeping."""

    def __init__(
        self, executor: AsyncExecutor, transport: AsyncWakeupTransport, intake: Intake
    ) -> None:
        self.executor = executor
        self.transport = transport
        self.intake = intake
        self.attempts: set[asyncio.Task[None]] = set()

    @property
    def leases(self) -> AsyncLeaseKeeper:
        return self.executor.leases


class AsyncWorker(WorkerBase):
    """Consumes wakeups from ``queues`` with up to ``concurrency`` attempts at once.

    ``session`` is an ``aioboto3.Session`` (default: a new one, which finds credentials
    and region as boto3 does); the app's endpoint, region and botocore config apply.
    """

    def __init__(
        self,
        app: AsyncHost,
        queues: Sequence[str] | None = None,
        *,
        session: Any | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        super().__init__(app, queues, **options)
        self._aws = app.aws
        self._aws_session = session
        self._session: _Session | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None
        """Set by :meth:`stop`: from then on an open long poll is waited for at most its
        wait and :data:`OPEN_POLL_MARGIN_SECONDS`."""
        self._stopping = False
        self._executed = 0
        self._returned = 0
        self._foreign = ForeignEnvironments()
        self._claim_lead = ClaimLead()
        self._protection = protection_from_env() if os.environ.get(ENV_AGENT) else None
        """On ECS: the task's scale-in protection while attempts are in flight."""
        """Other environments warned about: once per worker, not once per session."""
        self._fatal: MissingResourceError | None = None

    # public API -------------------------------------------------------------------

    async def run(self) -> None:
        """Work until :meth:`stop` is called or the process gets SIGTERM/SIGINT."""
        installed = self._install_signal_handlers()
        try:
            self._log_start("async worker")
            self._start_unparking()
            await self._work(max_runs=None, drain=False)
        finally:
            self._remove_signal_handlers(installed)

    async def drain(self, max_runs: int | None = None) -> int:
        """Process the work available now and return how many runs were executed.

        Stale and malformed wakeups are deleted, wakeups of other environments returned to
        their queue (:attr:`returned`); neither counts. Returns when a receive finds
        nothing and no attempt is in flight, or after ``max_runs`` runs.
        Raises the transport's error when a receive fails (after the AWS SDK's own
        retries): whether work is available is then unknown.
        """
        self._check_max_runs(max_runs)
        self._stopping = False
        await self._work(max_runs=max_runs, drain=True)
        return self._executed

    def stop(self) -> None:
        """Stop receiving and ask in-flight attempts to finish (safe from any thread)."""
        if not self._stopping:
            log.info("worker %s stopping", self.worker_id, extra=self._extra)
        self._stopping = True
        if self._session is not None:
            self._session.leases.cancel_all()
        loop, changed, stopped = self._loop, self._changed, self._stopped
        if loop is None or changed is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to wake
            loop.call_soon_threadsafe(changed.set)
            if stopped is not None:
                loop.call_soon_threadsafe(stopped.set)

    # the loop ---------------------------------------------------------------------

    async def _work(self, *, max_runs: int | None, drain: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._stopped = asyncio.Event()
        if self._stopping:
            self._stopped.set()
        self._fatal = None
        threads = DaemonThreads(self.config.concurrency)
        async with AsyncExitStack() as stack:
            stack.callback(threads.close)
            engine = self.engine
            store, transport = await open_ports(
                engine.store, engine.transport, self._aws, stack, self._aws_session
            )
            leases = AsyncLeaseKeeper(
                store, engine.clock, engine.config.lease_duration, engine.config.progress_interval
            )
            if self._protection is not None:
                leases.occupancy = self._protection.set
            path = MessagePath.of(
                engine, self.worker_id, foreign=self._foreign, claim_lead=self._claim_lead
            )
            intake = Intake(self.config, clock=engine.clock)
            executor = AsyncExecutor(
                engine, leases, path, store, transport, threads, hold=intake.hold
            )
            session = _Session(executor, transport, intake)
            self._session = session
            leases.start()
            try:
                await self._loop_until_done(session, max_runs=max_runs, drain=drain)
            finally:
                await self._shutdown(session)
                await asyncio.to_thread(engine.observer.flush)  # exporters may send
                self._executed = session.intake.executed
                self._returned = session.intake.returned
                self._session = None
        if self._fatal is not None:
            raise self._fatal

    async def _loop_until_done(
        self, session: _Session, *, max_runs: int | None, drain: bool
    ) -> None:
        intake = session.intake
        while not self._stopping:
            await self._flush_acks(session)
            if self._fatal is not None:
                break
            action = intake.next_action(max_runs)
            if action is LoopAction.STOP:
                break
            if action is LoopAction.DISPATCH:
                self._dispatch(session)
                continue
            idle = intake.pending == 0  # nothing in flight can publish during the receive
            if action is LoopAction.WAIT or not await self._fill(session, drain):
                if action is LoopAction.RECEIVE and idle and intake.pending == 0 and drain:
                    break
                await self._wait_for_change(session, timeout=intake.wait_timeout())

    async def _fill(self, session: _Session, drain: bool) -> bool:
        """Receive into the intake's buffer; False when nothing was available. A failed
        receive ends a drain (see :meth:`Worker._fill`), else it is retried a second later.
        """
        intake = session.intake
        wait = self.config.receive_wait(drain=drain, busy=intake.pending)
        for name in intake.receive_order():
            if self._stopping:
                return False
            try:
                messages = await self._receive(session, name, wait)
            except MissingResourceError:
                raise
            except RunlaneError as exc:
                if drain:
                    raise
                log.warning("receive from %r failed: %s", name, exc, extra=self._extra)
                await self._wait_for_change(session, timeout=1.0, idle=True)
                continue
            if messages is None:  # the stop outlasted the open receive's wait: cancelled
                return False
            if self._stopping:  # what the open receive brought after the stop
                await session.transport.release(messages)
                return False
            if messages:
                intake.add(messages)
                return True
        return False

    async def _receive(
        self, session: _Session, name: str, wait: int
    ) -> list[ReceivedWakeup] | None:
        """Receive. A stop waits for the receive to return: cancelling it would close
        the connection, but SQS keeps the poll open and gives it what arrives, invisible
        to every worker until its visibility timeout. At most ``wait`` and
        :data:`OPEN_POLL_MARGIN_SECONDS` after the stop; ``None`` if it has not returned
        by then (it is cancelled)."""
        stopped = self._stopped
        assert stopped is not None
        receiving = asyncio.ensure_future(
            session.transport.receive(name, self.config.prefetch, wait)
        )
        stopping = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait({receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait({receiving}, timeout=wait + OPEN_POLL_MARGIN_SECONDS)
        finally:
            stopping.cancel()
        if not receiving.done():
            log.warning(
                "the receive from %r did not return within %.0f s of the stop; what it "
                "brings may stay invisible until the queue's visibility timeout",
                name,
                wait + OPEN_POLL_MARGIN_SECONDS,
                extra=self._extra,
            )
            receiving.cancel()
            await asyncio.wait({receiving})
            return None
        return receiving.result()

    def _dispatch(self, session: _Session) -> None:
        message = session.intake.start_next()
        task = asyncio.get_running_loop().create_task(self._attempt(session, message))
        session.attempts.add(task)
        task.add_done_callback(session.attempts.discard)

    async def _attempt(self, session: _Session, message: ReceivedWakeup) -> None:
        disposition = Disposition.DEFERRED
        try:
            disposition = await session.executor.handle(message)
        except MissingResourceError as exc:
            log.error("stopping: %s", exc, extra=self._extra)
            self._fatal = exc
            self.stop()
        except asyncio.CancelledError:
            pass  # abandoned at shutdown: the message and the run wait for lease expiry
        except Exception:
            log.exception(
                "unexpected error handling message %s", message.message_id, extra=self._extra
            )
        finally:
            session.intake.finished(message, disposition)
            if self._changed is not None:
                self._changed.set()

    async def _wait_for_change(
        self, session: _Session, *, timeout: float, idle: bool = False
    ) -> None:
        """Wait until an attempt finishes or :meth:`stop` is called (at most ``timeout``);
        returns at once when nothing is in flight, unless ``idle``."""
        changed = self._changed
        assert changed is not None
        intake = session.intake
        if (
            not intake.busy and intake.pending and not idle
        ):  # messages held for their reserved start
            await pause_on_loop(self.engine, intake.wait_timeout())
            return
        if not (intake.busy or idle):
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)
        changed.clear()

    @property
    def returned(self) -> int:
        """Wakeups of other environments the last ``run()`` or ``drain()`` received and
        returned to their queue, for that environment's workers."""
        return self._returned

    @staticmethod
    async def _flush_acks(session: _Session, *, force: bool = False) -> None:
        """Delete handled messages when due (all if ``force``: the session ends); make
        wakeups of other environments visible again (see :meth:`Intake.take_releases`)."""
        acks = session.intake.take_acks(force=force)
        releases = session.intake.take_releases(ending=force)
        if acks:
            await session.transport.ack(acks)
        if releases:
            await session.transport.release(releases)

    async def _shutdown(self, session: _Session) -> None:
        """Hand back at once every message received and not started; an attempt that
        holds its message from now on hands it back itself (:meth:`Intake.close`). Then
        let the attempts in flight finish within the grace period."""
        unstarted = session.intake.close()
        if unstarted:
            await session.transport.release(unstarted)
        if session.attempts:
            session.leases.cancel_all()
            grace = self.config.grace_period.total_seconds()
            _, pending = await asyncio.wait(set(session.attempts), timeout=grace)
            if pending:
                log.warning(
                    "%d attempt(s) still running after the grace period; cancelling them. "
                    "Their leases will expire and maintenance will make the runs runnable "
                    "again",
                    len(pending),
                    extra=self._extra,
                )
                for task in pending:
                    task.cancel()
                _, stubborn = await asyncio.wait(pending, timeout=CANCEL_WAIT_SECONDS)
                if stubborn:
                    log.error(
                        "%d attempt(s) caught their cancellation and still run",
                        len(stubborn),
                        extra=self._extra,
                    )
        await self._flush_acks(session, force=True)
        self._log_returned(session.intake.returned)
        await session.leases.stop()

    # signals ----------------------------------------------------------------------

    def _install_signal_handlers(self) -> list[signal.Signals]:
        if threading.current_thread() is not threading.main_thread():
            return []
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        return list(STOP_SIGNALS)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping:
            session = self._session
            self._exit_now(sig, session.leases.run_ids() if session is not None else [])
        log.info("received %s", sig.name, extra=self._extra)
        self.stop()

    @staticmethod
    def _remove_signal_handlers(installed: list[signal.Signals]) -> None:
        loop = asyncio.get_running_loop()
        for sig in installed:
            loop.remove_signal_handler(sig)
