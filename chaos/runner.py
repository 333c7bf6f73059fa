"""One chaos run: start the fleet behind the fault proxy, trigger the runs at an even
pace while the timeline's faults fire, drain, stop everything and count."""

from __future__ import annotations

import heapq
import logging
import os
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3

from chaos import fanout, ledger
from chaos.app import (
    ASYNC_QUEUE,
    ASYNC_TASK,
    BROKEN,
    KEY_LIMIT,
    KEYED_TASK,
    LEASE_SECONDS,
    LOG_ENV,
    MAP,
    QUEUES,
    RATE,
    RATED_TASK,
    SYNC_QUEUE,
    SYNC_TASK,
    THEN,
    TICK,
    build_app,
    fixed_marker,
)
from chaos.backends import Backend
from chaos.capabilities import CapabilityFigures, check, rate_figures, schedule_figures
from chaos.fleet import ASYNC, SYNC, Fleet, Process
from chaos.plan import ORDERING_KEYS, TENANTS, Plan
from chaos.proxy import FaultPlan, fault_proxy
from chaos.wakeups import WakeupSender
from runlane_sqs import EventType, Runlane
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.core.errors import IllegalTransition, RunNotFound
from runlane_sqs.core.groups import (
    GroupStatus,
    callback_run_id,
    child_run_id,
    group_id_for,
    redrive_run_id,
    redriven_parent_id,
)
from runlane_sqs.core.model import WaitKind
from runlane_sqs.core.waits import wait_name

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKERS_PER_KIND = 2
log = logging.getLogger("chaos")


def _retrying(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The harness's own calls go straight to the emulators; they only fail while
    DynamoDB restarts, so try again (triggers carry an idempotency key)."""
    for _ in range(600):
        try:
            return fn(*args, **kwargs)
        except RunNotFound:
            raise
        except Exception as exc:  # RunlaneError or botocore's, while DynamoDB is down
            log.info("%s failed (%s); again", what, exc)
            time.sleep(0.2)
    raise RuntimeError(f"{what} kept failing")


@dataclass
class Chaos:
    plan: Plan
    backend: Backend
    out_dir: Path
    random: random.Random = field(init=False)
    faults: FaultPlan = field(init=False)
    triggered: dict[int, str] = field(default_factory=dict)
    """Index -> the run each trigger is judged by (a ``then`` trigger's: its callback)."""
    fan_outs: dict[int, fanout.FanOut] = field(default_factory=dict)
    restarts: int = 0
    zombies: int = 0
    last_fault_at: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    hit_runs: set[str] = field(default_factory=set)
    """Runs an earlier kill or freeze cut short."""
    rated: set[int] = field(default_factory=set)
    """The triggers of the rate-limited task."""
    order_seqs: Counter[str] = field(default_factory=Counter)
    """The next place in each ordering key's line."""
    capabilities: CapabilityFigures = field(default_factory=CapabilityFigures)
    first_trigger: threading.Event = field(default_factory=threading.Event)
    """The timeline starts with the first run, not with the slow first request."""
    retried: set[int] = field(default_factory=set)
    """The ``retried`` fan-outs whose ``retry-failed`` landed."""
    retry_refusals: int = 0

    def __post_init__(self) -> None:
        self.random = random.Random(self.plan.seed)
        self.faults = FaultPlan(
            error_rate=self.plan.steady_error_rate,
            drop_rate=self.plan.drop_rate,
            sqs_error_rate=self.plan.sqs_error_rate,
            lost_send_rate=self.plan.lost_send_rate,
            double_send_rate=self.plan.double_send_rate,
            late_delete_rate=self.plan.late_delete_rate,
            seed=self.plan.seed,
        )
        self.log_path = self.out_dir / "executions.jsonl"

    # --- set-up -------------------------------------------------------------------

    def _app(self, tag: str) -> Runlane:
        os.environ.update(self.backend.environment())
        os.environ.update(
            {"RUNLANE_TABLE": f"chaos-{tag}", "RUNLANE_QUEUE_PREFIX": f"chaos-{tag}-"}
        )
        return build_app(session=boto3.Session())

    def _worker_env(self, proxy_url: str) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        return {
            **os.environ,
            **self.backend.environment(proxy_url),
            LOG_ENV: str(self.log_path),
            "PYTHONPATH": path,
        }

    def run(self) -> tuple[ledger.Figures, fanout.GroupFigures, dict[str, int], float]:
        started = time.monotonic()
        app = self._app(uuid.uuid4().hex[:8])
        app.provision(list(QUEUES))
        transport = app.transport
        assert isinstance(transport, SqsTransport)
        urls = {q: transport.queue_url(q) for q in QUEUES}
        sqs = boto3.Session().client("sqs")
        sender = WakeupSender(sqs, urls, self.plan.seed)
        upstreams = {
            "": self.backend.dynamodb_endpoint,
            "DynamoDB_20120810": self.backend.dynamodb_endpoint,
            "AmazonSQS": self.backend.sqs_endpoint,
        }
        with fault_proxy(upstreams, self.faults) as proxy_url:
            # the triggers go through the proxy too; the harness reads what became of the
            # runs straight from the emulators (``app``)
            producer = build_app(session=boto3.Session(), endpoint_url=proxy_url)
            fleet = Fleet(self._worker_env(proxy_url), self.out_dir)
            try:
                for kind in (SYNC, ASYNC):
                    for _ in range(WORKERS_PER_KIND):
                        fleet.start_worker(kind)
                fleet.start_maintenance()
                schedule = threading.Thread(target=self._timeline, args=(fleet, sender))
                schedule.start()
                drained = threading.Event()
                retrier = threading.Thread(target=self._retry_failed, args=(app, producer, drained))
                retrier.start()
                self._trigger(producer, sender)
                schedule.join()
                statuses = self._drain(app, fleet)
                drained.set()
                retrier.join()
                time.sleep(LEASE_SECONDS)  # let a resumed zombie's handler end
            finally:
                fleet.stop()
        per_run = ledger.read_log(self.log_path)
        outages = self.backend.dynamodb.outages if self.backend.dynamodb else []
        faults = ledger.Faults(fleet.signals, outages, LEASE_SECONDS)
        found = [(f, self._found(app, f)) for f in self.fan_outs.values()]
        judged = fanout.judged(found)
        statuses.update(judged.statuses)
        figures = ledger.count(
            self.triggered, statuses, per_run, faults, judged.children, judged.designed
        )
        groups = fanout.judge(found, per_run)
        groups.retried, groups.retry_refusals = len(self.retried), self.retry_refusals
        self.capabilities = check(per_run, faults, KEY_LIMIT)
        self._check_stored(app)
        violating = list(
            dict.fromkeys(
                ledger.violating(figures)
                + groups.violating_runs
                + self.capabilities.out_of_order
                + self.capabilities.over_limit
            )
        )
        self.details = {
            "signals": [vars(s) for s in fleet.signals],
            "db_outages_seconds": [round(b - a, 1) for a, b in outages],
            "worker_exits": fleet.exits,
            "fan_outs": [vars(f) for f in self.fan_outs.values()],
            "violating_runs": self._histories(app, violating, per_run),
            "violating_groups": [
                fanout.describe(f, stored)
                for f, stored in found
                if f.run_id in groups.violating_runs
            ][:5],
        }
        injected = self._injected(fleet, sender)
        return figures, groups, injected, time.monotonic() - started

    def _check_stored(self, app: Runlane) -> None:
        """The invariants storage shows: each occurrence of the schedule created once and
        none missed between the first and the last; no one-second window with more
        starts of the rate-limited task than its rate (its runs' ``started`` events)."""
        occurrences: list[datetime] = []
        cursor: str | None = None
        while True:
            page = _retrying("list", app.runs.list, schedule=TICK.id, limit=100, cursor=cursor)
            occurrences += [r.scheduled_for for r in page.runs if r.scheduled_for is not None]
            if (cursor := page.cursor) is None:
                break
        starts = [
            e.at.timestamp()
            for i in sorted(self.rated)
            for e in _retrying("events", app.runs.events, self.triggered[i])
            if e.type is EventType.STARTED
        ]
        assert TICK.interval is not None
        schedule_figures(self.capabilities, occurrences, TICK.interval)
        rate_figures(self.capabilities, starts, RATE)

    def _found(self, app: Runlane, fan_out: fanout.FanOut) -> fanout.Found:
        """What storage holds for a fan-out: its group, its parent or callback, its
        children and the parent's history."""
        store = app.store
        beyond = child_run_id(fan_out.group_id, len(fan_out.values))
        group = _retrying("group", store.groups.get_group, fan_out.group_id)
        reruns = {
            index: _retrying("get", store.get_run, redrive_run_id(group.id, index, generation))
            for index, generation in (group.redriven if group is not None else ())
        }
        return fanout.Found(
            group=group,
            run=_retrying("get", store.get_run, fan_out.run_id),
            children=[_retrying("get", store.get_run, c) for c in fan_out.children],
            beyond=_retrying("get", store.get_run, beyond),
            events=_retrying("events", store.get_events, fan_out.first_run)
            if fan_out.shape == MAP
            else [],
            first=_retrying("get", store.get_run, fan_out.first_run),
            reruns=reruns,
        )

    # --- retry-failed ---------------------------------------------------------------

    def _retry_failed(self, app: Runlane, producer: Runlane, drained: threading.Event) -> None:
        """Rerun the failed children of each ``retried`` fan-out as an impatient operator
        would, as soon as its group has joined failed: fix the broken child, then ask
        ``retry-failed`` through the fault proxy, again until it lands. Until its parent
        has failed (or its first callback has ended) it is refused, and counted."""
        while not drained.is_set():
            for fan_out in list(self.fan_outs.values()):
                if fan_out.mode == fanout.RETRIED and fan_out.index not in self.retried:
                    try:
                        self._retry_one(app, producer, fan_out)
                    except Exception as exc:  # storage faults: try again later
                        log.info("retry-failed of group %s: %s", fan_out.group_id, exc)
            drained.wait(0.5)

    def _retry_one(self, app: Runlane, producer: Runlane, fan_out: fanout.FanOut) -> None:
        group = app.store.groups.get_group(fan_out.group_id)
        if group is None or group.joined_at is None or group.generation:
            if group is not None and group.generation:
                self.retried.add(fan_out.index)
            return
        if group.status is not GroupStatus.FAILED:
            return
        fixed = fixed_marker(str(self.log_path), fan_out.index)
        Path(fixed).touch()
        try:
            producer.runs.retry_failed(fan_out.group_id, reason="chaos: fixed", actor="chaos")
        except IllegalTransition as exc:
            self.retry_refusals += 1
            log.info("retry-failed of group %s refused: %s", fan_out.group_id, exc)
            return  # landed before (read again next time), or too early
        self.retried.add(fan_out.index)

    def _histories(
        self, app: Runlane, run_ids: list[str], per_run: dict[str, list[ledger.Execution]]
    ) -> dict[str, dict[str, Any]]:
        """Each violating run's executions (from the ground-truth log) beside its stored
        events, so a failed run in CI can be read from its output alone."""
        histories: dict[str, dict[str, Any]] = {}
        for run_id in run_ids[:5]:
            try:
                events = _retrying("events", app.runs.events, run_id)
            except RunNotFound:
                events = []
            histories[run_id] = {
                "executions": [vars(e) for e in per_run.get(run_id, [])],
                "events": [
                    {"seq": e.seq, "type": str(e.type), "at": e.at.timestamp(), **e.data}
                    for e in events
                ],
            }
        return histories

    def _injected(self, fleet: Fleet, sender: WakeupSender) -> dict[str, int]:
        actions = [s.action for s in fleet.signals]
        return {
            "kills": actions.count("kill"),
            "zombies": actions.count("stop"),
            "duplicate_wakeups": sender.duplicates,
            "forged_wakeups": sender.forged,
            "throttles": self.faults.injected["throttle"],
            "server_errors": self.faults.injected["server_error"],
            "dropped_responses": self.faults.injected["dropped_response"],
            "db_down_errors": self.faults.injected["upstream_down"],
            "sqs_throttles": self.faults.injected["sqs_throttle"],
            "sqs_server_errors": self.faults.injected["sqs_server_error"],
            "lost_sends": self.faults.injected["lost_send"],
            "double_sends": self.faults.injected["double_send"],
            "late_deletes": self.faults.injected["late_delete"],
            "purges": sender.purges,
            "db_restarts": self.restarts,
        }

    # --- the trigger phase ----------------------------------------------------------

    def _kind(self) -> str:
        pick, total = self.random.random(), 0.0
        for kind, share in self.plan.mix:
            total += share
            if pick < total:
                return kind
        return self.plan.mix[0][0]

    def _task(self) -> tuple[str, str]:
        """A task and its queue: each worker kind half the time."""
        if self.random.random() < 0.5:
            return ASYNC_TASK, ASYNC_QUEUE
        return SYNC_TASK, SYNC_QUEUE

    def _shape(self) -> str | None:
        """:data:`MAP`, :data:`THEN` or ``None`` (a single run), by the plan's shares."""
        pick = self.random.random()
        if pick < self.plan.map_share:
            return MAP
        if pick < self.plan.map_share + self.plan.then_share:
            return THEN
        return None

    def _items(self, i: int) -> tuple[str, frozenset[int], list[dict[str, Any]]]:
        """The mode of the next fan-out (each in turn), its broken items and its
        children's payloads: kinds from the mix, ``broken`` for the broken ones, a value
        each."""
        mode = fanout.MODES[len(self.fan_outs) % len(fanout.MODES)]
        count = self.random.randint(*self.plan.fan_out_items)
        broken: frozenset[int] = frozenset()
        if mode != fanout.SUCCEEDS:
            many = self.random.randint(1, 2) if mode == fanout.TOLERATES else 1
            broken = frozenset(self.random.sample(range(count), many))
        items = [
            {
                "i": i,
                "kind": BROKEN if n in broken else self._kind(),
                "item": n,
                "value": self.random.randint(1, 1000),
            }
            for n in range(count)
        ]
        return mode, broken, items

    def _trigger(self, app: Runlane, sender: WakeupSender) -> None:
        pending: list[tuple[float, str, str]] = []  # (when, run id, queue): duplicates
        begin = time.monotonic()
        interval = self.plan.trigger_seconds / self.plan.runs
        for i in range(self.plan.runs):
            while time.monotonic() < begin + i * interval:
                self._send_due(pending, sender)
                time.sleep(0.01)
            run_id, queue, also = self._trigger_one(app, i)
            self.triggered[i] = self.fan_outs[i].run_id if i in self.fan_outs else run_id
            self.first_trigger.set()
            if i % 50 == 0:
                log.info("triggered %d runs", i + 1)
            if self.random.random() < self.plan.duplicate_share:
                for copied, copied_queue in [(run_id, queue), *also]:
                    delay = self.random.uniform(0, self.plan.duplicate_delay_seconds)
                    heapq.heappush(pending, (time.monotonic() + delay, copied, copied_queue))
            if self.random.random() < self.plan.forged_share:
                _retrying("forge", sender.forge, run_id, queue)
        while pending:
            self._send_due(pending, sender)
            time.sleep(0.05)

    def _trigger_one(self, app: Runlane, i: int) -> tuple[str, str, list[tuple[str, str]]]:
        """Trigger the ``i``-th run or group: the run id it is judged by, its queue, and
        the (run id, queue) of a fan-out's first child, whose wakeup a duplicate copies
        too."""
        shape = self._shape()
        task, queue = self._task()
        if shape == THEN:
            return self._trigger_group(app, i, task, queue)
        options: dict[str, Any] = {}
        if shape == MAP:
            child_task, child_queue = self._task()
            window = self.plan.fan_out_window
            mode, broken, items = self._items(i)
            tolerate = len(broken) if mode == fanout.TOLERATES else 0
            payload = {
                "i": i,
                "kind": MAP,
                "task": child_task,
                "window": window,
                "tolerate": tolerate,
                "items": items,
            }
        else:
            payload = {"i": i, "kind": self._kind()}
            task, queue, options = self._capability(i, task, queue, payload)
        key = f"chaos-{self.plan.seed}-{i}"
        run = _retrying("trigger", app.trigger, task, payload, idempotency_key=key, **options)
        if shape != MAP:
            return run.id, queue, []
        group_id = group_id_for(run.id, wait_name(WaitKind.GROUP, None, 1))
        values = tuple(item["value"] for item in items)
        judged = redriven_parent_id(group_id, 1) if mode == fanout.RETRIED else run.id
        self.fan_outs[i] = fanout.FanOut(
            i, MAP, group_id, judged, values, mode=mode, broken=broken, first_run=run.id
        )
        return run.id, queue, [(child_run_id(group_id, 0), child_queue)]

    def _capability(
        self, i: int, task: str, queue: str, payload: dict[str, Any]
    ) -> tuple[str, str, dict[str, Any]]:
        """A share of single runs get an ordering key (and their place among its runs in
        ``payload``), another share are runs of the task limited per tenant, another of
        the rate-limited task."""
        pick = self.random.random()
        if pick < self.plan.ordered_share:
            key = f"chaos-{self.plan.seed}-order-{i % ORDERING_KEYS}"
            payload |= {"key": key, "seq": self.order_seqs[key]}
            self.order_seqs[key] += 1
            return task, queue, {"ordering_key": key}
        pick -= self.plan.ordered_share
        if pick < self.plan.keyed_share:
            payload["tenant"] = f"tenant-{i % TENANTS}"
            return KEYED_TASK, SYNC_QUEUE, {}
        if pick - self.plan.keyed_share < self.plan.rated_share:
            self.rated.add(i)
            return RATED_TASK, SYNC_QUEUE, {}
        return task, queue, {}

    def _trigger_group(
        self, app: Runlane, i: int, task: str, queue: str
    ) -> tuple[str, str, list[tuple[str, str]]]:
        """``app.group`` over a few children of either task, with ``task`` as its
        callback; judged by the callback run."""
        mode, broken, items = self._items(i)
        tolerate = len(broken) if mode == fanout.TOLERATES else 0
        tasks = [self._task() for _ in items]
        children = [(child_task, item) for (child_task, _), item in zip(tasks, items, strict=True)]
        sent: list[None] = []

        def start() -> Any:
            sent.append(None)
            then = (task, {"i": i, "kind": THEN})
            window = self.plan.fan_out_window
            return app.group(children, then=then, max_in_flight=window, tolerate=tolerate)

        group = _retrying("group", start)
        callback = callback_run_id(group.id)
        judged = callback_run_id(group.id, 1) if mode == fanout.RETRIED else callback
        values = tuple(item["value"] for item in items)
        self.fan_outs[i] = fanout.FanOut(
            i, THEN, group.id, judged, values, len(sent) > 1, mode, broken, callback
        )
        return callback, queue, [(child_run_id(group.id, 0), tasks[0][1])]

    def _send_due(self, pending: list[tuple[float, str, str]], sender: WakeupSender) -> None:
        while pending and pending[0][0] <= time.monotonic():
            _, run_id, queue = heapq.heappop(pending)
            _retrying("duplicate", sender.duplicate, run_id, queue)

    # --- the faults -----------------------------------------------------------------

    def _timeline(self, fleet: Fleet, sender: WakeupSender) -> None:
        self.first_trigger.wait()
        begin = time.monotonic()
        events = self.plan.timeline()
        thaw: tuple[float, Process] | None = None
        while events or thaw:
            now = time.monotonic() - begin
            fleet.replace_dead()
            if thaw and now >= thaw[0]:
                fleet.thaw(thaw[1])
                thaw = None
                self.last_fault_at = time.monotonic()
            if events and now >= events[0][0]:
                _, action = events.pop(0)
                frozen = self._fire(action, fleet, sender)
                if frozen is not None:
                    thaw = (now + self.plan.zombie_leases * LEASE_SECONDS, frozen)
                self.last_fault_at = time.monotonic()
            time.sleep(0.1)

    def _busiest(self, fleet: Fleet, wait_seconds: float = 3.0) -> Process | None:
        """The live worker with the most executions in flight (a random one on a tie),
        waiting a little for one that has any. A worker running a run that an earlier
        kill or freeze already cut short is spared: three lease losses in a row fail a
        run by design (``lease_lost``, a run that keeps killing its workers), and the
        suite must not manufacture that."""
        deadline = time.monotonic() + wait_seconds
        while True:
            per_run = ledger.read_log(self.log_path)
            busy = ledger.in_flight(per_run)
            held = {
                e.pid
                for run_id in self.hit_runs
                for e in per_run.get(run_id, [])
                if e.ended is None
            }
            live = [w for w in fleet.live() if w.pid not in held]
            self.random.shuffle(live)
            chosen = max(live, key=lambda w: busy.get(w.pid, 0), default=None)
            if chosen is None or busy.get(chosen.pid) or time.monotonic() > deadline:
                if chosen is not None:
                    self.hit_runs |= {
                        e.run
                        for runs in per_run.values()
                        for e in runs
                        if e.pid == chosen.pid and e.ended is None
                    }
                return chosen
            time.sleep(0.1)

    def _fire(self, action: str, fleet: Fleet, sender: WakeupSender) -> Process | None:
        log.info("fault: %s begins", action)
        try:
            return self._fire_now(action, fleet, sender)
        finally:
            log.info("fault: %s done", action)

    def _fire_now(self, action: str, fleet: Fleet, sender: WakeupSender) -> Process | None:
        if action == "kill" and (victim := self._busiest(fleet)) is not None:
            fleet.kill(victim)
        elif action == "freeze" and (victim := self._busiest(fleet)) is not None:
            fleet.freeze(victim)
            return victim
        elif action == "burst":
            self.faults.burst(self.plan.burst_error_rate, self.plan.burst_seconds)
        elif action == "purge":
            sender.purge()
        elif action == "restart" and self.backend.dynamodb is not None:
            self.backend.dynamodb.restart()
            self.restarts += 1
        return None

    # --- the drain ------------------------------------------------------------------

    def _status(self, app: Runlane, run_id: str) -> str | None:
        try:
            return str(_retrying("get", app.runs.get, run_id).status)
        except RunNotFound:
            return None

    def _drain(self, app: Runlane, fleet: Fleet) -> dict[str, str | None]:
        """Poll until every run is terminal, or the drain bound has passed."""
        statuses: dict[str, str | None] = {}
        open_ids = list(self.triggered.values())
        deadline = max(self.last_fault_at, time.monotonic())
        deadline += self.plan.drain_leases * LEASE_SECONDS
        while True:
            fleet.replace_dead()
            for run_id in open_ids:
                statuses[run_id] = self._status(app, run_id)
            open_ids = [r for r in open_ids if statuses[r] not in ledger.TERMINAL]
            if not open_ids or time.monotonic() > deadline:
                return statuses
            time.sleep(1.0)
