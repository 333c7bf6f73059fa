"""One simulated history: the fleet built, the workload triggered, faults and crashes
injected while it runs, then a quiet spell (no fault) in which everything triggered must
finish, then the invariants.

``Simulation(seed, scenario).run()`` returns an :class:`Outcome`; equal seeds and
scenarios give equal outcomes, down to :attr:`Outcome.digest` (the hash of the whole
trace).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import greenlet

from runlane_sqs import Runlane
from runlane_sqs.adapters.dynamodb.items import table_definition
from runlane_sqs.adapters.dynamodb.keys import RUN_SK, run_key
from runlane_sqs.core.errors import IllegalTransition, RunlaneError
from simulation.determinism import governed_by
from simulation.invariants import TERMINAL, Observed, stored_runs, violations
from simulation.processes import (
    ENVIRONMENT,
    LEASE_SECONDS,
    TABLE,
    Client,
    Maintenance,
    Worker,
    queue_prefix,
)
from simulation.services import Faults, SimDynamoDB, SimSqs
from simulation.workload import QUEUES, Ledger, Planned, epoch_us, plan
from simulation.world import Process, World

SECOND = 1_000_000
TRIGGER_TRIES = 3


@dataclass(frozen=True)
class Scenario:
    """The shape of one history: how many runs, processes and faults."""

    runs: int = 60
    workers: int = 3
    concurrency: int = 4
    maintenance: int = 2
    spread_seconds: int = 60
    """Triggers are spread over this much virtual time; faults strike during it too."""
    quiet_seconds: int = 1800
    """The longest the quiet spell after it may take for every run to finish."""
    max_skew_ms: int = 50
    faults: Faults = field(
        default_factory=lambda: Faults(
            throttle=0.01,
            lost_write=0.01,
            sqs_error=0.01,
            lost_send=0.01,
            duplicate=0.02,
            slow=0.02,
        )
    )
    crashes_per_minute: float = 1.0
    """Across the fleet's workers: each a kill, then a restart a moment later."""
    freezes_per_minute: float = 1.0
    """Across the fleet's workers: each a pause, sometimes longer than a lease."""
    long_freezes: float = 1 / 3
    """The share of pauses longer than a lease (the others last 0.5 or 5 seconds)."""
    cancels: float = 0.03
    """The share of runs an operator cancels at some point after their trigger."""


@dataclass
class Outcome:
    """What one seed gave."""

    seed: int
    runs: int
    violations: list[tuple[str, str]]
    digest: str
    trace: list[str]
    virtual_seconds: float
    steps: int

    @property
    def passed(self) -> bool:
        return not self.violations


class Simulation:
    """The world, its services and its processes, for one seed."""

    def __init__(self, seed: int, scenario: Scenario | None = None) -> None:
        self.scenario = scenario or Scenario()
        self.world = World(seed)
        rng = self.world.rng
        self.max_skew_us = self.scenario.max_skew_ms * 1000
        self.dynamodb = SimDynamoDB(self.world, self.scenario.faults)
        self.dynamodb.inner.create_table(**table_definition(TABLE))
        self.sqs = SimSqs(self.world, self.scenario.faults)
        for queue in QUEUES:
            self.sqs.create(f"{queue_prefix()}{queue}")
        self.ledger = Ledger()
        self.unexpected: list[str] = []
        self.triggered: dict[str, Planned] = {}
        self.by_key: dict[str, list[tuple[int, str]]] = {}
        self.cancelled: set[str] = set()
        self.expired_unfinished: list[str] = []
        self.dynamodb.before_write = self._fenced

        def skew() -> int:
            return rng.randrange(-self.max_skew_us, self.max_skew_us + 1)

        self.workers = [
            Worker(self, Process(f"worker-{i}", skew_us=skew()), self.scenario.concurrency)
            for i in range(self.scenario.workers)
        ]
        self.maintenance = [
            Maintenance(self, Process(f"maint-{i}", skew_us=skew()))
            for i in range(self.scenario.maintenance)
        ]
        self.producer = Client(self, Process("producer", skew_us=skew()))
        self.operator = Client(self, Process("operator", skew_us=skew()))

    # the history ----------------------------------------------------------------------------

    def run(self) -> Outcome:
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the trace says what happened; logs only cost
        try:
            with governed_by(self.world):
                try:
                    self._run()
                finally:
                    self.world.close()
        finally:
            logging.disable(previous)
        runs = stored_runs(self.dynamodb.inner.items(TABLE))
        seen = Observed(
            runs=runs,
            ledger=self.ledger,
            triggered=self.triggered,
            by_key=self.by_key,
            cancelled=self.cancelled,
            unexpected=self.unexpected + self.expired_unfinished,
        )
        for run_id in (
            runs.keys() - self.triggered.keys()
        ):  # made by a trigger whose answer was lost
            if runs[run_id].run.status not in TERMINAL:
                seen.unexpected.append(f"run {run_id} (its trigger's answer lost) never finished")
        return Outcome(
            seed=self.world.seed,
            runs=len(runs),
            violations=violations(seen),
            digest=self.world.digest,
            trace=list(self.world.trace),
            virtual_seconds=self.world.seconds,
            steps=self.world.steps,
        )

    def _run(self) -> None:
        world, scenario = self.world, self.scenario
        for worker in self.workers:
            worker.start()
        for job in self.maintenance:
            job.start()
        self.producer.start()
        self.operator.start()
        spread_us = scenario.spread_seconds * SECOND
        for planned in plan(world, scenario.runs, spread_us):
            self.producer.at(planned.at_us, partial(self._trigger, planned=planned))
        self._plan_faults(spread_us)
        world.call(None, 10 * 60 * SECOND, self._sweep_ttl)
        world.run_until(spread_us)
        self._quiet()
        deadline = world.now_us + scenario.quiet_seconds * SECOND
        while world.now_us < deadline and not self._all_finished():
            world.run_until(world.now_us + 10 * SECOND)

    def _trigger(self, app: Runlane, planned: Planned) -> None:
        asked_us = epoch_us(app.clock.now())
        for _ in range(TRIGGER_TRIES):
            try:
                options = (
                    {"idempotency_key": planned.idempotency_key} if planned.idempotency_key else {}
                )
                run = app.trigger(planned.task, planned.payload, **options)  # type: ignore[arg-type]
            except RunlaneError as exc:
                self.world.note(f"trigger {planned.task} failed: {exc}")
                self.world.wait(SECOND)
                continue
            self.triggered.setdefault(run.id, planned)
            if planned.idempotency_key:
                given = self.by_key.setdefault(planned.idempotency_key, [])
                given.append((asked_us, run.id))
            self.world.note(f"triggered {run.id} {planned.task} {planned.payload}")
            if self.world.rng.random() < self.scenario.cancels:
                after = self.world.rng.randrange(0, 20 * SECOND)
                self.operator.at(self.world.now_us + after, partial(self._cancel, run_id=run.id))
            return

    def _cancel(self, app: Runlane, run_id: str) -> None:
        try:
            app.runs.cancel(run_id, reason="simulated operator")
        except IllegalTransition:
            self.world.note(f"cancel {run_id}: already finished")
            return
        except RunlaneError as exc:
            self.world.note(f"cancel {run_id} failed: {exc}")
        self.cancelled.add(run_id)  # landed, or may have (its answer lost)
        self.world.note(f"cancel {run_id}")

    # faults ---------------------------------------------------------------------------

    def _plan_faults(self, spread_us: int) -> None:
        world, scenario, rng = self.world, self.scenario, self.world.rng
        minutes = spread_us / (60 * SECOND)
        for _ in range(round(scenario.crashes_per_minute * minutes)):
            worker = rng.choice(self.workers)
            at = rng.randrange(spread_us)
            back = rng.randrange(SECOND, 10 * SECOND)
            world.call(None, at, partial(self._crash, worker, back))
        for _ in range(round(scenario.freezes_per_minute * minutes)):
            worker = rng.choice(self.workers)
            at = rng.randrange(spread_us)
            if rng.random() < scenario.long_freezes:
                length = (LEASE_SECONDS + 15) * SECOND
            else:
                length = rng.choice((SECOND // 2, 5 * SECOND))
            world.call(None, at, partial(world.freeze, worker.process, length))

    def _crash(self, worker: Worker, back_us: int) -> None:
        if not worker.process.alive:
            return
        worker.crash()
        self.world.call(None, back_us, worker.restart)

    def _quiet(self) -> None:
        """The faults stop and every worker is up: what was triggered must now finish."""
        quiet = replace(Faults.none())
        for service in (self.dynamodb, self.sqs):
            service.faults = quiet
            service.latency.faults = quiet
        for worker in self.workers:
            if not worker.process.alive:
                worker.restart()
        self.world.note("faults stop")

    def _sweep_ttl(self) -> None:
        for item in self.dynamodb.expire(TABLE, self.world.now.timestamp()):
            status = item.get("status", {}).get("S")
            if item["sk"]["S"] == RUN_SK and status not in {s.value for s in TERMINAL}:
                self.expired_unfinished.append(f"TTL deleted run item {item['pk']} in {status}")
        self.world.call(None, 10 * 60 * SECOND, self._sweep_ttl)

    def _fenced(self, request: dict[str, Any]) -> Callable[[], None] | None:
        """For a write an attempt sends once its handler was entered: note, if it lands,
        whether its run's lease was that attempt's when it did (3: fencing)."""
        entry = self.ledger.by_greenlet.get(greenlet.getcurrent())
        if entry is None or entry.outcome_written:
            return None
        own = run_key(ENVIRONMENT, entry.run_id)
        keys = [request.get("Key")] + [
            body.get("Key")
            for action in request.get("TransactItems", ())
            for body in action.values()
        ]
        if own not in keys:
            return None
        stored = self.dynamodb.inner.get_item(TableName=TABLE, Key=own).get("Item", {})
        holder = stored.get("lease_token", {}).get("S")

        def landed() -> None:
            if entry.finished:  # the handler returned: this is its outcome, the last
                entry.outcome_written = True
            if holder != entry.token:
                self.ledger.unfenced.append(
                    f"run {entry.run_id}: attempt {entry.attempt} on {entry.process} wrote to "
                    f"it while {'another lease' if holder else 'no lease'} held it"
                )

        return landed

    def _all_finished(self) -> bool:
        """Whether every run in storage is finished (a scan of the table as it is: no
        request of any process, no fault)."""
        terminal = [status.value for status in TERMINAL]
        unfinished = self.dynamodb.inner.scan(
            TableName=TABLE,
            FilterExpression="sk = :run AND NOT (#status IN (:a, :b, :c))",
            ProjectionExpression="pk",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":run": {"S": RUN_SK},
                **{f":{k}": {"S": v} for k, v in zip("abc", terminal, strict=True)},
            },
        )
        return not unfinished["Items"]


def run_seed(seed: int, scenario: Scenario | None = None) -> Outcome:
    return Simulation(seed, scenario).run()
