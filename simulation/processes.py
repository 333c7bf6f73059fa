"""The simulated processes, each our real code on greenlets: workers, maintenance, a
producer and an operator.

A worker is the sync worker's loop without its threads: the same :class:`Intake` paces
its receives, dispatches and deletes, the same :class:`Executor` drives each message's
path (:class:`~runlane_sqs.engine.message.MessagePath`) and calls the handler, the same
:class:`LeaseBook` decides what each renewal means. Its attempts and its heartbeat are
greenlets of the process, where the real worker has threads; a request to a simulated
service or a ``time.sleep`` hands control back to the scheduler. A crash drops every
greenlet of the process at once (nothing of it runs again, as after ``SIGKILL``); the
process then starts again as a new worker.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from runlane_sqs import Runlane
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.s3 import S3Objects
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.api.telemetry import Telemetry
from runlane_sqs.core.errors import MissingResourceError, RunlaneError
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.rates import to_epoch_us
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.executor import Executor, LeaseBook, TrackedAttempt
from runlane_sqs.runtime.worker import Intake, LoopAction, WorkerConfig
from simulation.workload import BUCKET, INLINE_LIMIT, QUEUES, WEIGHTS, Handlers, register
from simulation.world import Process, Signal, SimClock

if TYPE_CHECKING:
    from simulation.simulator import Simulation

log = logging.getLogger("simulation")
ENVIRONMENT = "sim"
TABLE = "runlane-sim"
LEASE_SECONDS = 30
MAINTENANCE_SECONDS = 10
REPUBLISH_AFTER_SECONDS = 60
"""How long a published wakeup is trusted (the product's default is 5 minutes): lost
wakeups come back sooner, so each history's tail is shorter and cheaper, and more
republishes race the wakeups they duplicate."""
WAIT_SECONDS = 5
APP_VERSIONS = ("sim-1", "sim-2")
"""The versions of the fleet's code: workers alternate between them (maintenance, the
producer and the operator run the first). Named, so no process looks its package's
version up."""


def build_app(sim: Simulation, process: Process, version: str = APP_VERSIONS[0]) -> Runlane:
    """The app as one process builds it, at ``version``: our real store and transport
    over the simulated services, the process's clock, the workload's tasks."""
    clock = SimClock(sim.world, process)
    store = DynamoRunStore(sim.dynamodb, TABLE, ENVIRONMENT)
    store.sleep = sim_sleep
    app = Runlane(
        clock=clock,
        store=store,
        transport=SqsTransport(sim.sqs, queue_prefix=queue_prefix()),
        objects=S3Objects(sim.s3, BUCKET),
        telemetry=Telemetry(tracing=False, metrics=()),
        environment=ENVIRONMENT,
        table=TABLE,
        lease_duration=LEASE_SECONDS,
        maintenance_period=MAINTENANCE_SECONDS,
        republish_after=REPUBLISH_AFTER_SECONDS,
        app_version=version,
        payload_bucket=BUCKET,
        inline_limit=INLINE_LIMIT,
    )
    handlers = Handlers(sim.world, sim.ledger, 2 * sim.max_skew_us, version)
    register(app, handlers, sim.scenario.spread_seconds)
    return app


def sim_sleep(seconds: float) -> None:
    import time  # noqa: PLC0415 (the patched one: read at call time)

    time.sleep(seconds)


def queue_prefix() -> str:
    return f"runlane-{ENVIRONMENT}-"


@dataclass(eq=False)
class Worker:
    """A sync worker process: its loop, its attempts and its heartbeat on greenlets."""

    sim: Simulation
    process: Process
    concurrency: int
    version: str = APP_VERSIONS[0]
    sessions: int = 0
    executed: int = 0
    _state: _Session | None = field(default=None, repr=False)

    def start(self) -> None:
        self.sessions += 1
        app = build_app(self.sim, self.process, self.version)
        worker_id = f"{self.process.name}-{self.sessions}"
        config = WorkerConfig.build(
            list(QUEUES),  # the tasks' queues and the one some triggers give, by weight
            concurrency=self.concurrency,
            wait_seconds=WAIT_SECONDS,
            worker_id=worker_id,
            weights=WEIGHTS,
        )
        world = self.sim.world
        intake = Intake(config, monotonic=lambda: world.seconds, clock=app.clock)
        leases = LeaseBook(app.clock, app.config.lease_duration, app.config.progress_interval)
        path = MessagePath.of(app.engine, worker_id)
        state = _Session(app, config, intake, leases, Signal(world, self.process))
        state.executor = Executor(app.engine, leases, path, hold=intake.hold)
        self._state = state
        world.spawn(self.process, self._loop)
        world.spawn(self.process, self._heartbeat, after_us=int(leases.interval_seconds * 1e6))
        world.spawn(self.process, self._reporter)

    def _loop(self) -> None:
        state = self._state
        assert state is not None
        intake = state.intake
        while True:
            self._flush(state)
            action = intake.next_action(None)
            if action is LoopAction.DISPATCH:
                message = intake.start_next()
                self.sim.world.spawn(self.process, partial(self._attempt, state, message))
                continue
            if action is LoopAction.RECEIVE and self._fill(state):
                continue
            if intake.busy:
                state.done.wait(int(intake.wait_timeout() * 1e6))
            elif intake.pending:
                self.sim.world.wait(int(intake.wait_timeout() * 1e6))

    def _fill(self, state: _Session) -> bool:
        intake = state.intake
        wait = state.config.receive_wait(drain=False, busy=intake.pending)
        transport = state.app.engine.transport
        order = intake.receive_order()
        self.sim.ledger.turns.setdefault(state.config.worker_id, []).append(order[0])
        for name in order:
            try:
                messages = transport.receive(name, state.config.prefetch, wait)
            except RunlaneError:
                self.sim.world.wait(1_000_000)
                continue
            if messages:
                intake.add(messages)
                return True
        return False

    def _attempt(self, state: _Session, message: ReceivedWakeup) -> None:
        disposition = Disposition.DEFERRED
        try:
            assert state.executor is not None
            disposition = state.executor.handle(message)
        except MissingResourceError:
            raise
        except Exception as exc:  # the real worker logs it and carries on: so do we, noted
            where = traceback.format_exc(limit=-8).replace("\n", " | ")
            self.sim.unexpected.append(f"{self.process.name}: {type(exc).__name__}: {where}")
            self.sim.world.note(f"unexpected error handling {message.message_id}: {exc!r}")
        finally:
            state.intake.finished(message, disposition)
            if disposition is Disposition.EXECUTED:
                self.executed += 1
            state.done.notify()

    def _flush(self, state: _Session) -> None:
        acks = state.intake.take_acks()
        releases = state.intake.take_releases()
        transport = state.app.engine.transport
        if acks:
            transport.ack(acks)
        if releases:
            transport.release(releases)

    def _heartbeat(self) -> None:
        state = self._state
        assert state is not None
        interval_us = int(state.leases.interval_seconds * 1e6)
        while True:
            for attempt, lease in state.leases.renewals():
                self._renew(state, attempt, lease)
            self.sim.world.wait(interval_us)

    def _reporter(self) -> None:
        """What the keeper's thread does for reports: write those due, one after the
        other, then look again a progress interval later."""
        state = self._state
        assert state is not None
        interval_us = int(state.app.config.progress_interval.total_seconds() * 1e6)
        while True:
            for attempt, report in state.leases.reports_due():
                answer: Run | RunlaneError
                try:
                    answer = state.app.store.report_progress(
                        attempt.run, attempt.token or "", report
                    )
                except RunlaneError as exc:
                    answer = exc
                state.leases.reported(attempt, report, answer)
            self.sim.world.wait(interval_us)

    def _renew(self, state: _Session, attempt: TrackedAttempt, lease: Lease) -> None:
        if not state.leases.tracks(attempt):
            return
        renewal: Run | RunlaneError
        try:
            renewal = state.app.store.renew_lease(attempt.run, lease)
        except RunlaneError as exc:
            renewal = exc
        state.leases.settle(attempt, renewal)
        if isinstance(renewal, Run) and renewal.lease is not None:
            self.sim.ledger.renewed(
                renewal.id, renewal.attempt, to_epoch_us(renewal.lease.expires_at)
            )

    def crash(self) -> None:
        self.sim.world.crash(self.process)
        self._state = None

    def restart(self) -> None:
        """Start again after a crash; nothing if it runs already (the faults' end restarted
        it before the restart its crash had planned)."""
        if self.process.alive:
            return
        self.sim.world.revive(self.process)
        self.start()


@dataclass(eq=False)
class _Session:
    app: Runlane
    config: WorkerConfig
    intake: Intake
    leases: LeaseBook
    done: Signal
    executor: Executor | None = None


@dataclass(eq=False)
class Maintenance:
    """The scheduled maintenance job: one pass every period, give or take a little."""

    sim: Simulation
    process: Process
    passes: int = 0

    def start(self, passes: int | None = None) -> None:
        """Pass every period from now on (or only ``passes`` times)."""
        app = build_app(self.sim, self.process)
        self.sim.world.spawn(self.process, lambda: self._loop(app, passes))

    def _loop(self, app: Runlane, passes: int | None) -> None:
        rng = self.sim.world.rng
        while passes is None or self.passes < passes:
            try:
                app.maintenance.run_pass()
            except RunlaneError as exc:  # the next pass carries on where this one stopped
                self.sim.world.note(f"maintenance pass failed: {exc}")
            self.passes += 1
            self.sim.world.wait(int((MAINTENANCE_SECONDS + rng.uniform(-1, 1)) * 1e6))


@dataclass(eq=False)
class Client:
    """A process that calls the app's API at chosen times: a producer, an operator."""

    sim: Simulation
    process: Process
    app: Runlane | None = None

    def start(self) -> None:
        self.app = build_app(self.sim, self.process)

    def at(self, at_us: int, action: Callable[[Runlane], None]) -> None:
        """Run ``action`` on this process's greenlet at ``at_us``."""

        def run() -> None:
            assert self.app is not None
            action(self.app)

        self.sim.world.spawn(self.process, run, after_us=max(0, at_us - self.sim.world.now_us))
