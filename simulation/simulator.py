"""One simulated history: the fleet built, the workload triggered, faults and crashes
injected while it runs, then a quiet spell (no fault) in which everything triggered must
finish, then the invariants.

``Simulation(seed, scenario).run()`` returns an :class:`Outcome`; equal seeds and
scenarios give equal outcomes, down to :attr:`Outcome.digest` (the hash of the whole
trace).
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import greenlet

from runlane_sqs import Runlane
from runlane_sqs.adapters.dynamodb.groups import group_from_wire
from runlane_sqs.adapters.dynamodb.items import table_definition
from runlane_sqs.adapters.dynamodb.keys import GROUP_SK, RUN_SK, group_key, operation_pk, run_key
from runlane_sqs.core.bulk import BulkAction, BulkFilter, BulkOperation
from runlane_sqs.core.errors import (
    IllegalTransition,
    RunlaneError,
    StorageUnavailable,
    TransactionCancelled,
)
from runlane_sqs.core.groups import Group, callback_run_id
from runlane_sqs.core.model import Run, RunStatus, WaitKind
from runlane_sqs.core.progress import progress_from_text
from runlane_sqs.core.rates import to_epoch_us
from runlane_sqs.core.tokens import TokenAlreadyDecided
from runlane_sqs.core.values import PIN_DURATION, RELEASE_GRACE
from runlane_sqs.core.wakeup import MalformedWakeup, parse_wakeup
from simulation.determinism import governed_by
from simulation.invariants import TERMINAL, Observed, Stored, stored_runs, violations
from simulation.processes import (
    APP_VERSIONS,
    ENVIRONMENT,
    LEASE_SECONDS,
    TABLE,
    Client,
    Maintenance,
    Worker,
    queue_prefix,
)
from simulation.services import Faults, SimDynamoDB, SimS3, SimSqs
from simulation.workload import (
    BATCHED,
    CALLBACK,
    CHILD,
    CHORD,
    CHORD_REDRIVES,
    DEBOUNCED,
    FAILING,
    ORDERS,
    PLAIN,
    QUEUES,
    RELEASED_SIGNALLED,
    SCHEDULE_ID,
    SIGNALLED,
    TOKENED,
    WAITER,
    Ledger,
    Planned,
    children,
    plan,
    signal_key,
    signal_value,
)
from simulation.world import EPOCH, Process, World

SECOND = 1_000_000
BULK_RATE = 2.0
"""Runs a second the bulk operation acts on: slow enough that its process dies during it."""
SETTLE = max(PIN_DURATION, RELEASE_GRACE) + timedelta(minutes=2)
"""How long after the prune the last maintenance pass comes: past every writer's pin of an
object and every released object's grace, so it reviews each object record a guard could
let go wrongly."""
TRIGGER_TRIES = 3
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
"""A run's id, as the invariants name it."""
FOLLOW_TRIES = 600
"""How often an operator looks at a run it signals (every 2 s: 20 minutes)."""


@dataclass(frozen=True)
class Scenario:
    """The shape of one history: how many runs, processes and faults."""

    runs: int = 200
    """Triggers by the producer (a fan-out's children and a repeated key come on top)."""
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
    mix: frozenset[str] | None = None
    """The tasks the producer triggers (default: every task of the workload)."""


@dataclass
class Chords:
    """The groups with a callback the producer started, and what the operator did to
    them."""

    planned: dict[str, Planned] = field(default_factory=dict)
    """Each chord's group id the producer was given, with its trigger."""
    redrives: dict[str, int] = field(default_factory=dict)
    """How many times the operator reruns each chord's failed children (at most)."""
    joins: dict[str, dict[int, Group]] = field(default_factory=lambda: defaultdict(dict))
    """Each chord's group as the operator read it at each join it reran, by generation:
    what that join's callback had to see."""
    redriving: bool = True
    """Whether the operator may still rerun a chord's failed children (not once the
    triggers are over: every run must then be able to finish)."""


@dataclass
class Outcome:
    """What one seed gave."""

    seed: int
    runs: int
    """Every run the history made (the producers' and their children), pruned or not."""
    violations: list[tuple[str, str]]
    digest: str
    trace: list[str]
    """The history's last lines."""
    about: dict[str, list[str]]
    """The last lines about each run a broken invariant names."""
    virtual_seconds: float
    finished_seconds: float
    """When every run had finished, in virtual seconds (the quiet spell's end)."""
    steps: int
    collapsed: int = 0
    """Triggers that went to a run another trigger made (debounced, batched)."""

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
        self.dynamodb.inner.create_table(
            TableName=ORDERS,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.sqs = SimSqs(self.world, self.scenario.faults)
        for queue in QUEUES:
            self.sqs.create(f"{queue_prefix()}{queue}")
        self.sqs.before_send = self._published
        self.s3 = SimS3(self.world, self.scenario.faults)
        self.ledger = Ledger()
        self.unexpected: list[str] = []
        self.triggered: dict[str, Planned] = {}
        self.by_key: dict[str, list[tuple[int, str]]] = {}
        self.cancelled: set[str] = set()
        self.expired_unfinished: list[str] = []
        self.unstored_publishes: list[str] = []
        self.rolled_back: dict[str, str] = {}
        """Runs of transactions refused (their order was written before), by run id."""
        self.pruned: dict[str, Stored] = {}
        """Runs an operator pruned once everything finished, as they were before."""
        self.finished_seconds = 0.0
        """When every run had finished (virtual seconds)."""
        self.committed: dict[str, str] = {}
        """Runs of transactions that committed, with their order."""
        self.collected: dict[int, tuple[str, str, int | None]] = {}
        """Each debounced or batched trigger that returned: its task, the run it was told
        carries its item, and (a batch) the item's index, by the trigger's number."""
        self.resent: set[int] = set()
        """Debounced or batched triggers sent again after an error (their item may be in
        two runs: the producer could not know the first had landed)."""
        self.returned: dict[str, int] = {}
        """When a trigger first returned each run (µs since the Unix epoch, by the
        producer's clock): the run was stored by then."""
        self.rival_decisions: list[str] = []
        """Second completions of a token that were accepted."""
        self.chords = Chords()
        self.dynamodb.before_write = self._before_write

        def skew() -> int:
            return rng.randrange(-self.max_skew_us, self.max_skew_us + 1)

        self.workers = [
            Worker(
                self,
                Process(f"worker-{i}", skew_us=skew()),
                self.scenario.concurrency,
                APP_VERSIONS[i % len(APP_VERSIONS)],
            )
            for i in range(self.scenario.workers)
        ]
        self.maintenance = [
            Maintenance(self, Process(f"maint-{i}", skew_us=skew()))
            for i in range(self.scenario.maintenance)
        ]
        self.producer = Client(self, Process("producer", skew_us=skew()))
        self.operator = Client(self, Process("operator", skew_us=skew()))
        self.bulk = Client(self, Process("bulk", skew_us=skew()))
        """An operator's process that carries out a bulk operation, and is killed during
        it: maintenance carries it on."""

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
            object_data=dict(self.s3.objects),
            orders=self._orders(),
            rolled_back=self.rolled_back,
            committed=self.committed,
            unstored_publishes=self.unstored_publishes,
            pruned=self.pruned,
            collected=self.collected,
            resent=self.resent,
            rival_decisions=self.rival_decisions,
            returned=self.returned,
            chords=self.chords.planned,
            groups=self._groups(),
            joins=dict(self.chords.joins),
            versions={w.process.name: w.version for w in self.workers},
            operations=self._operations(),
            bulk_cutoff=self._cutoff(),
            spread_seconds=self.scenario.spread_seconds,
            max_skew_us=self.max_skew_us,
        )
        for run_id in (
            runs.keys() - self.triggered.keys()
        ):  # made by a trigger whose answer was lost
            if runs[run_id].run.status not in TERMINAL:
                seen.unexpected.append(f"run {run_id} (its trigger's answer lost) never finished")
        broken = violations(seen)
        named = {run_id for _, line in broken for run_id in RUN_ID.findall(line)}
        return Outcome(
            seed=self.world.seed,
            runs=len(runs) + len(self.pruned),
            violations=broken,
            digest=self.world.digest,
            trace=list(self.world.trace),
            about={run_id: list(self.world.about.get(run_id, ())) for run_id in sorted(named)},
            virtual_seconds=self.world.seconds,
            finished_seconds=self.finished_seconds,
            steps=self.world.steps,
            collapsed=sum(s.run.collapsed for s in [*runs.values(), *self.pruned.values()]),
        )

    def _run(self) -> None:
        world, scenario = self.world, self.scenario
        for worker in self.workers:
            worker.start()
        for job in self.maintenance:
            job.start()
        self.producer.start()
        self.operator.start()
        self.bulk.start()
        spread_us = scenario.spread_seconds * SECOND
        for planned in plan(world, scenario.runs, spread_us, scenario.mix):
            self.producer.at(planned.at_us, partial(self._trigger, planned=planned))
        self._plan_faults(spread_us)
        self.operator.at(spread_us // 3, partial(self._pause_schedule, resume=False))
        self.bulk.at(2 * spread_us // 3, self._bulk_retry)
        self.operator.at(spread_us // 2, partial(self._pause_schedule, resume=True))
        world.call(None, 10 * 60 * SECOND, self._sweep_ttl)
        world.call(None, max(0, spread_us - 10 * SECOND), self._stop_redrives)
        world.run_until(spread_us)
        self._quiet()
        deadline = world.now_us + scenario.quiet_seconds * SECOND
        while world.now_us < deadline and not self._all_finished():
            world.run_until(world.now_us + 10 * SECOND)
        self.finished_seconds = world.seconds
        self._settle()

    def _trigger(self, app: Runlane, planned: Planned) -> None:
        if planned.task == CHORD:
            self._start_chord(app, planned)
            return
        if not self._prepared(app, planned):
            return
        for tries in range(TRIGGER_TRIES):
            try:
                run = self._triggered(app, planned)
            except TransactionCancelled:
                return  # rolled back: noted by _triggered
            except RunlaneError as exc:
                self.world.note(f"trigger {planned.task} failed: {exc}")
                self.world.wait(SECOND)
                continue
            answered_us = to_epoch_us(app.clock.now())
            self.triggered.setdefault(run.id, planned)
            self.returned.setdefault(run.id, answered_us)
            self._follow(planned, run, tries)
            if planned.idempotency_key:
                given = self.by_key.setdefault(planned.idempotency_key, [])
                given.append((answered_us, run.id))
            self.world.note(f"triggered {run.id} {planned.task}")
            if self.world.rng.random() < self.scenario.cancels:
                after = self.world.rng.randrange(0, 20 * SECOND)
                self.operator.at(self.world.now_us + after, partial(self._cancel, run_id=run.id))
            return

    def _prepared(self, app: Runlane, planned: Planned) -> bool:
        """What a trigger needs first: a tokened run's token, a waiter's run to wait for."""
        if planned.task not in (TOKENED, WAITER) or "target" in planned.payload:
            return True
        for _ in range(TRIGGER_TRIES):
            try:
                planned.payload["target"] = self._target(app, planned)
            except RunlaneError as exc:
                self.world.note(f"preparing {planned.task} failed: {exc}")
                self.world.wait(SECOND)
                continue
            return True
        return False

    def _target(self, app: Runlane, planned: Planned) -> str:
        if planned.task == TOKENED:
            token = app.tokens.create()
            planned.payload["token"] = token.id
            complete_at = self.world.now_us + self.world.rng.randrange(0, 15 * SECOND)
            self.operator.at(complete_at, partial(self._complete, planned=planned))
            return token.id
        task = PLAIN if planned.payload["target_ok"] else FAILING
        target = Planned(planned.at_us, task, {"n": planned.payload["target_n"]})
        run = app.trigger(task, target.payload)
        self.triggered.setdefault(run.id, target)
        self.world.note(f"triggered {run.id} {task}, for a waiter")
        return run.id

    def _follow(self, planned: Planned, run: Run, tries: int) -> None:
        """Note where a collapsed trigger went; signal a run that will wait for one."""
        n = planned.payload["n"]
        if planned.task in (DEBOUNCED, BATCHED):
            self.collected[n] = (planned.task, run.id, run.item)
            if tries:
                self.resent.add(n)
        if planned.task in (SIGNALLED, RELEASED_SIGNALLED):
            self.operator.at(
                self.world.now_us + self.world.rng.randrange(0, 10 * SECOND),
                partial(self._signal, run_id=run.id, planned=planned, tries=0),
            )

    def _signal(self, app: Runlane, run_id: str, planned: Planned, tries: int) -> None:
        """An operator sends the run's signal once the run waits for it, and looks again
        until the run has finished (a signal sent before it waits is not kept: 7)."""
        try:
            run = app.runs.get(run_id)
            waits = run.waiting is not None and run.waiting.kind is WaitKind.SIGNAL
            if run.is_terminal:
                return
            if run.status is RunStatus.RELEASED and waits:
                woke = app.signals.send(signal_key(planned.payload), signal_value(planned.payload))
                self.world.note(f"signal {signal_key(planned.payload)} woke {woke} run(s)")
        except RunlaneError as exc:
            self.world.note(f"signal of {run_id} failed: {exc}")
        if tries < FOLLOW_TRIES:
            again = partial(self._signal, run_id=run_id, planned=planned, tries=tries + 1)
            self.operator.at(self.world.now_us + 2 * SECOND, again)

    def _complete(self, app: Runlane, planned: Planned) -> None:
        """An operator completes a tokened run's token (whether the run waits yet or not),
        then a second operator tries to decide it otherwise (8: the first decision wins)."""
        token_id = planned.payload["token"]
        for _ in range(FOLLOW_TRIES):
            try:
                app.tokens.complete(token_id, signal_value(planned.payload))
            except TokenAlreadyDecided:
                pass  # this very completion, its answer lost the first time
            except RunlaneError as exc:
                self.world.note(f"completing token {token_id} failed: {exc}")
                self.world.wait(2 * SECOND)
                continue
            break
        try:
            app.tokens.complete(token_id, {"v": -1})
        except TokenAlreadyDecided:
            return
        except RunlaneError as exc:
            self.world.note(f"second completion of token {token_id} failed: {exc}")
            return
        self.rival_decisions.append(f"token {token_id} was completed a second time")

    def _start_chord(self, app: Runlane, planned: Planned) -> None:
        """A group of children with a callback (``app.group(..., then=...)``), which an
        operator follows: it reruns the failed children of some (``retry-failed``) once
        the callback of their join has ended."""
        payload = planned.payload
        for _ in range(TRIGGER_TRIES):
            try:
                group = app.group(
                    [(CHILD, item) for item in children(payload)],
                    then=(CALLBACK, {"n": payload["n"]}),
                    max_in_flight=payload["in_flight"],
                    tolerate=payload["tolerate"],
                )
            except RunlaneError as exc:  # an answer lost: the group may exist, unknown
                self.world.note(f"chord {payload['n']} failed to start: {exc}")
                self.world.wait(SECOND)
                continue
            self.chords.planned[group.id] = planned
            self.chords.redrives[group.id] = self.world.rng.choice((0, 1, 1, CHORD_REDRIVES))
            self.world.note(f"chord {payload['n']} started as group {group.id}", group.id)
            follow = partial(self._follow_chord, group_id=group.id, tries=0)
            self.operator.at(self.world.now_us + 2 * SECOND, follow)
            return

    def _follow_chord(self, app: Runlane, group_id: str, tries: int) -> None:
        """An operator looks at a chord every 2 s: once its join's callback has ended, it
        reruns its failed children, up to the times planned for it."""
        try:
            group = app.runs.group(group_id)
            if group.joined_at is not None:
                callback = app.runs.get(callback_run_id(group.id, group.generation))
                if callback.is_terminal and not self._redrive(app, group):
                    return
        except RunlaneError as exc:
            self.world.note(f"following chord group {group_id} failed: {exc}", group_id)
        if tries < FOLLOW_TRIES and self.chords.redriving:
            again = partial(self._follow_chord, group_id=group_id, tries=tries + 1)
            self.operator.at(self.world.now_us + 2 * SECOND, again)

    def _redrive(self, app: Runlane, group: Group) -> bool:
        """Rerun a joined group's failed children if the plan says so: whether to look
        again (a rerun asked for, or refused and to be read again)."""
        nothing = group.failed + group.cancelled == 0 and group.started >= group.total
        planned = self.chords.redrives[group.id]
        if nothing or group.generation >= planned or not self.chords.redriving:
            return False
        self.chords.joins[group.id][group.generation] = group
        try:
            app.runs.retry_failed(group.id, reason="simulated operator")
        except IllegalTransition as exc:  # its answer lost, then asked again: read again
            self.world.note(f"retry-failed of group {group.id} refused: {exc}", group.id)
            return True
        self.world.note(f"retry-failed of group {group.id} (generation {group.generation})")
        return True

    def _bulk_retry(self, app: Runlane) -> None:
        """An operator retries, as one bulk operation, every run of the task that always
        fails triggered in the first half of the spell (at two runs a second); its
        process is killed a moment after it starts, and maintenance carries it on."""
        selection = BulkFilter(
            statuses=(RunStatus.FAILED,), task=FAILING, created_before=self._cutoff()
        )
        for _ in range(TRIGGER_TRIES):
            try:
                operation = app.bulk.start(BulkAction.RETRY, selection, rate=BULK_RATE)
            except RunlaneError as exc:  # an answer lost: the operation may exist, unknown
                self.world.note(f"bulk retry failed to start: {exc}")
                self.world.wait(SECOND)
                continue
            self.world.note(f"bulk operation {operation.id} started")
            kill = self.world.rng.randrange(SECOND // 5, 6 * SECOND)
            self.world.call(None, kill, partial(self.world.crash, self.bulk.process))
            try:
                app.bulk.run(operation.id, owner="bulk-operator")
            except RunlaneError as exc:
                self.world.note(f"bulk operation {operation.id} stopped: {exc}")
            return

    def _cutoff(self) -> datetime:
        """The runs triggered before this are retried in bulk, and pruned at the end."""
        return EPOCH + timedelta(seconds=self.scenario.spread_seconds / 2)

    def _operations(self) -> dict[str, BulkOperation]:
        """The bulk operations in the table at the end, by id (read straight from it)."""
        items = self.dynamodb.inner.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": operation_pk(ENVIRONMENT)}},
        )["Items"]
        found = (BulkOperation.from_json(json.loads(item["record"]["S"])) for item in items)
        return {operation.id: operation for operation in found}

    def _groups(self) -> dict[str, Group]:
        """Each chord's group record at the end, read straight from the table."""
        groups = {}
        for group_id in self.chords.planned:
            key = group_key(ENVIRONMENT, group_id)
            item = self.dynamodb.inner.get_item(TableName=TABLE, Key=key).get("Item")
            if item is not None:
                groups[group_id] = group_from_wire(item)
        return groups

    def _pause_schedule(self, app: Runlane, resume: bool) -> None:
        """An operator pauses the schedule for a while, then resumes it (its catch-up
        ``all`` makes the occurrences missed meanwhile)."""
        for _ in range(TRIGGER_TRIES * 3):
            try:
                change = app.schedules.resume if resume else app.schedules.pause
                change(SCHEDULE_ID)
            except RunlaneError as exc:
                self.world.note(f"schedule {'resume' if resume else 'pause'} failed: {exc}")
                self.world.wait(SECOND)
                continue
            self.world.note(f"schedule {SCHEDULE_ID} {'resumed' if resume else 'paused'}")
            return

    def _triggered(self, app: Runlane, planned: Planned) -> Run:
        """``app.trigger``, or a transaction writing the planned order with the run."""
        if planned.order is None:
            triggered: Run = app.trigger(planned.task, planned.payload, **planned.options)  # type: ignore[call-overload]
            return triggered
        tx = app.transaction()
        tx.put(ORDERS, {"id": planned.order}, condition="attribute_not_exists(id)")
        run = tx.trigger(planned.task, planned.payload)
        for _ in range(TRIGGER_TRIES):  # the same token: a commit that landed is a no-op
            try:
                tx.commit()
            except TransactionCancelled:
                self.rolled_back[run.id] = planned.order
                self.world.note(f"transaction of {run.id} rolled back: {planned.order} exists")
                raise
            except StorageUnavailable:
                self.world.wait(SECOND)
                continue
            self.committed[run.id] = planned.order
            return run
        raise StorageUnavailable(f"the transaction of {run.id} did not commit")

    def _published(self, body: str) -> None:
        """A wakeup is sent: the run it names must be stored already (12)."""
        try:
            wakeup = parse_wakeup(body)
        except MalformedWakeup:
            return
        key = run_key(ENVIRONMENT, wakeup.run_id)
        if "Item" not in self.dynamodb.inner.get_item(TableName=TABLE, Key=key):
            self.unstored_publishes.append(f"a wakeup of run {wakeup.run_id} was sent first")

    def _orders(self) -> set[str]:
        return {item["id"]["S"] for item in self.dynamodb.inner.items(ORDERS)}

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

    def _stop_redrives(self) -> None:
        """The operator reruns no more chords' children: those it reran must finish."""
        self.chords.redriving = False

    def _quiet(self) -> None:
        """The faults stop and every worker is up: what was triggered must now finish."""
        quiet = replace(Faults.none())
        for service in (self.dynamodb, self.sqs, self.s3):
            service.faults = quiet
            service.latency.faults = quiet
        for worker in self.workers:
            if not worker.process.alive:
                worker.restart()
        self.world.note("faults stop")

    def _settle(self) -> None:
        """Every run finished: the fleet stops, and once every writer's pin of an object is
        over, one more maintenance pass reviews the object records (a guard that let one
        go while a run still references it shows then)."""
        for worker in self.workers:
            worker.crash()
        for job in self.maintenance:
            self.world.crash(job.process)
        finished = stored_runs(self.dynamodb.inner.items(TABLE))
        self.operator.at(self.world.now_us, self._prune)
        self.world.run_until(self.world.now_us + 60 * SECOND)
        kept = stored_runs(self.dynamodb.inner.items(TABLE))
        self.pruned = {run_id: run for run_id, run in finished.items() if run_id not in kept}
        self.world.run_until(self.world.now_us + int(SETTLE.total_seconds()) * SECOND)
        last = Maintenance(self, Process("maint-last"))
        last.start(passes=1)
        self.world.run_until(self.world.now_us + 60 * SECOND)

    def _prune(self, app: Runlane) -> None:
        """An operator prunes the runs triggered in the first half of the spell (objects
        their payloads share with later runs lose a holder, and are reviewed later)."""
        cutoff = self._cutoff()
        cursor = None
        for _ in range(1000):
            try:
                report = app.runs.prune(older_than=cutoff, cursor=cursor)
            except RunlaneError as exc:
                self.world.note(f"prune failed: {exc}")
                return
            cursor = report.cursor
            if cursor is None:
                return

    def _sweep_ttl(self) -> None:
        for item in self.dynamodb.expire(TABLE, self.world.now.timestamp()):
            status = item.get("status", {}).get("S")
            if item["sk"]["S"] == RUN_SK and status not in {s.value for s in TERMINAL}:
                self.expired_unfinished.append(f"TTL deleted run item {item['pk']} in {status}")
        self.world.call(None, 10 * 60 * SECOND, self._sweep_ttl)

    def _before_write(self, request: dict[str, Any]) -> Callable[[], None] | None:
        """What to note of a write if it lands: an attempt's write (fencing), or a report
        of progress (sent by a worker's reporter, not by the handler)."""
        return self._fenced(request) or self._reported(request)

    def _reported(self, request: dict[str, Any]) -> Callable[[], None] | None:
        """For a write of an attempt's report alone (progress, no event): note, if it
        lands, whether the run was still at that attempt under a lease (29: a stale
        attempt's report is refused)."""
        names = set(request.get("ExpressionAttributeNames", {}).values())
        if "progress" not in names or "seq" in names or "Key" not in request:
            return None
        texts = [v.get("S", "") for v in request.get("ExpressionAttributeValues", {}).values()]
        reported = [progress_from_text(t) for t in texts if t.startswith('{"done"')]
        if not reported or reported[0] is None:
            return None
        attempt = reported[0].attempt
        stored = self.dynamodb.inner.get_item(TableName=TABLE, Key=request["Key"]).get("Item", {})
        at = int(stored.get("attempt", {}).get("N", "0"))
        leased = "lease_token" in stored

        def landed() -> None:
            if at != attempt or not leased:
                self.ledger.unfenced.append(
                    f"run {request['Key']['pk']['S']}: a report of attempt {attempt} landed "
                    f"while the run was at attempt {at}{'' if leased else ' with no lease'}"
                )

        return landed

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
        """Whether every run in storage is finished, every group has joined and every bulk
        operation is done (a scan of the table as it is: no request of any process, no
        fault). A group whose last child's finisher did not count it joins when
        maintenance repairs it; maintenance carries on an operation whose process died
        once its lease expired."""
        terminal = [status.value for status in TERMINAL]
        unfinished = self.dynamodb.inner.scan(
            TableName=TABLE,
            FilterExpression=(
                "(sk = :run AND NOT (#status IN (:a, :b, :c))) "
                "OR (sk = :group AND attribute_not_exists(joined_at)) "
                "OR (pk = :bulk AND attribute_exists(agenda_pk))"
            ),
            ProjectionExpression="pk",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":run": {"S": RUN_SK},
                ":group": {"S": GROUP_SK},
                ":bulk": {"S": operation_pk(ENVIRONMENT)},
                **{f":{k}": {"S": v} for k, v in zip("abc", terminal, strict=True)},
            },
        )
        return not unfinished["Items"]


def run_seed(seed: int, scenario: Scenario | None = None) -> Outcome:
    return Simulation(seed, scenario).run()
