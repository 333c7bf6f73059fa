"""The components the IAM policies are for, at work against the emulator while a
recorder notes each request (tests/processes/test_iam_actions.py checks the policies
against what they did)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from runlane_sqs import (
    Batch,
    BulkFilter,
    Debounce,
    ManualClock,
    OperationStatus,
    RateLimit,
    RetryPolicy,
    Run,
    Runlane,
    RunStatus,
    Schedule,
    ScheduleStatus,
    TaskContext,
)
from runlane_sqs.core import machine
from runlane_sqs.core.dead_letters import Verdict
from runlane_sqs.core.indexes import AGENDA_SHARDS
from runlane_sqs.core.model import new_lease_token
from runlane_sqs.core.ordering import TURN_CHECK_AFTER
from runlane_sqs.core.slots import key_scope, queue_scope
from runlane_sqs.core.values import (
    PIN_DURATION,
    RELEASE_GRACE,
    Holder,
    Reference,
    Sealed,
    ValueField,
    ValuePlace,
    run_references,
)
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.engine.reports import JOB_EXPIRED, JOB_OBJECTS, JOB_RATES, JOB_SLOTS, JOB_WAITS
from runlane_sqs.lambdas.consumer import sqs_handler
from tests.emulators import wait_until
from tests.iam_policies import (
    ACCOUNT,
    REGION,
    Access,
    Recorder,
    Values,
    queue_arn,
    statements,
    through_key,
)
from tests.workers import DRAIN_WAIT_SECONDS, AnyWorker

PRODUCER, WORKER, CONSUMER, MAINTENANCE, OPERATOR = (
    "producer",
    "worker",
    "consumer",
    "maintenance",
    "operator",
)


# --- the components' tasks ---------------------------------------------------------

OK, ORDERED, FLAKY, BROKEN, LATER = "iam.ok", "iam.ordered", "iam.flaky", "iam.broken", "iam.later"
SIGNAL, TOKEN, PARENT, SLOW = "iam.signal", "iam.token", "iam.parent", "iam.slow"
SCHEDULED, SCHEDULE = "iam.scheduled", "iam.hourly"
LARGE = "iam.large"
"""Returns a large result of a large payload (both kept in the payload bucket)."""
KEYED = "iam.keyed"
"""One run per customer at a time (a ``key_limit``)."""
ORDERED_SCOPE = queue_scope("ordered")
"""The FIFO queue runs one run at a time (a ``concurrency_limit``)."""
KEYED_SCOPE = key_scope(KEYED, "acme")
RATED = "iam.rated"
"""One start a second (a rate limit)."""
BATCHED = "iam.batched"
"""Items gather per task in batches of two, at most an hour old."""
DEBOUNCED = "iam.debounced"
"""Triggers collapse per ``key`` until an hour of quiet, their payloads merged (due later
than SQS can delay: no wakeup is sent that a later drain would count)."""
ELSEWHERE = "iam.elsewhere"
"""A task the workers do not register: they park its runs."""
LEASE_SECONDS = 3
"""The workers' lease: their heartbeat beats every second, within ``SLOW``'s attempt."""
SLOW_SECONDS = 1.5
KIB = 1024


def blob(size: int, seed: str) -> dict[str, Any]:
    """A value of about ``size`` bytes as JSON, its text varied by ``seed``."""
    unit = hashlib.sha256(seed.encode()).hexdigest()
    return {"seed": seed, "blob": (unit * (size // len(unit) + 1))[:size]}


def register(app: Runlane, *, workers: bool = False) -> None:
    """The user's tasks, as every component's app module registers them (the workers'
    leave out ``ELSEWHERE``, whose code is deployed elsewhere)."""
    app.task(lambda ctx, payload: payload, name=OK)
    app.task(lambda ctx, payload: {"back": payload["blob"][::-1]}, name=LARGE)
    ordered = app.queue("ordered", concurrency_limit=1)
    app.task(lambda ctx, payload: payload, name=ORDERED, queue=ordered)
    app.task(
        lambda ctx, payload: payload,
        name=KEYED,
        concurrency_key=lambda payload: payload["customer"],
        key_limit=1,
    )
    app.task(lambda ctx, payload: payload, name=RATED, rate_limits=[RateLimit(1, per=1)])
    app.task(
        lambda ctx, payload: payload,
        name=DEBOUNCED,
        debounce=Debounce(quiet=timedelta(hours=1), key=lambda p: p["key"], merge=merge_items),
    )
    app.task(
        lambda ctx, items: len(items),
        name=BATCHED,
        batch=Batch(size=2, max_age=timedelta(hours=1)),
    )
    app.task(
        lambda ctx, payload: payload,
        name=SCHEDULED,
        schedules=[Schedule.every(SCHEDULE, timedelta(hours=1), payload={"n": 1})],
    )
    register_outcomes(app)
    register_waits(app)
    if not workers:
        app.task(lambda ctx, payload: payload, name=ELSEWHERE)


def merge_items(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {**new, "items": old["items"] + new["items"]}


def register_outcomes(app: Runlane) -> None:
    @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=0))
    def flaky(ctx: TaskContext, payload: Any) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return ctx.attempt

    @app.task(name=BROKEN)
    def broken(ctx: TaskContext, payload: Any) -> None:
        raise ValueError("always")

    @app.task(name=LATER)
    def later(ctx: TaskContext, payload: Any) -> int:
        if ctx.attempt == 1:
            ctx.release(delay=0)
        return ctx.attempt

    @app.task(name=SLOW)
    def slow(ctx: TaskContext, payload: Any) -> Any:
        time.sleep(SLOW_SECONDS)  # a heartbeat renews the lease meanwhile
        return ctx.step("done", lambda: "slowly")


def register_waits(app: Runlane) -> None:
    @app.task(name=SIGNAL)
    def signal(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal(payload["key"]).payload

    @app.task(name=TOKEN)
    def token(ctx: TaskContext, payload: Any) -> Any:
        token_id = payload.get("token") or ctx.step(
            "token", lambda: app.tokens.create(timeout=timedelta(hours=1)).id
        )
        return ctx.wait_for_token(token_id).status

    @app.task(name=PARENT)
    def parent(ctx: TaskContext, payload: Any) -> Any:
        child = payload.get("child") or ctx.step("child", lambda: app.trigger(OK, "child").id)
        return ctx.wait_for_run(child).status


# --- recording ----------------------------------------------------------------------


# --- the components at work --------------------------------------------------------


class LambdaContext:
    def __init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@dataclass
class Components:
    """One app per component (each its own process in a deployment), all on one clock."""

    clock: ManualClock
    setup: Runlane
    """The test's own app: forges leases, not recorded."""
    producer: Runlane
    worker: Runlane
    consumer: Runlane
    maintenance: Runlane
    operator: Runlane
    recorder: Recorder
    sqs: Any
    """The test's own SQS client (not recorded)."""
    queue_urls: dict[str, str]

    def drain(self) -> int:
        """Drain until a drain executes nothing; each ends with a short poll (as
        tests/workers.py builds workers), not a one-second long poll per queue."""
        total = 0
        while executed := self._short_polling(
            self.worker.worker(["default", "ordered"], worker_id="ecs")
        ).drain():
            total += executed
        return total

    def drain_async(self) -> int:
        worker = self.worker.async_worker(
            ["default", "ordered"], session=self.recorder.aio_session(WORKER)
        )
        return asyncio.run(self._short_polling(worker).drain())

    @staticmethod
    def _short_polling(worker: AnyWorker) -> AnyWorker:
        worker.config = replace(worker.config, drain_wait_seconds=DRAIN_WAIT_SECONDS)
        return worker

    def deliver(self) -> int:
        """Play the event source mapping: receive (the test's client), invoke the consumer
        handler, delete what it did not report."""
        handler = sqs_handler(self.consumer)
        delivered = 0
        for url in self.queue_urls.values():
            while messages := self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
            ).get("Messages", []):
                records = [
                    {
                        "messageId": m["MessageId"],
                        "receiptHandle": m["ReceiptHandle"],
                        "body": m["Body"],
                        "attributes": m.get("Attributes", {}),
                        "messageAttributes": {},
                        "eventSource": "aws:sqs",
                        "eventSourceARN": queue_arn(url.rsplit("/", 1)[-1]),
                        "awsRegion": REGION,
                    }
                    for m in messages
                ]
                response = handler({"Records": records}, LambdaContext())
                assert response["batchItemFailures"] == []
                self.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )
                delivered += len(messages)
        return delivered

    def forge_lease(
        self, run_id: str, deadline: timedelta | None = None, owner: str = "dead-worker"
    ) -> None:
        """A worker claimed the run, with the slots of its concurrency limits, and died (no
        heartbeat, no outcome), or is still at work (``owner``)."""
        run = self.setup.runs.get(run_id)
        claim = machine.claim_lease(
            run,
            now=self.clock.now(),
            owner=owner,
            token=new_lease_token(),
            duration=timedelta(minutes=1),
            timeout=deadline,
            slots=self.setup.tasks.slots_for(run),
        )
        assert isinstance(claim, machine.Transition)
        self.setup.store.apply(claim)

    def succeed_elsewhere(
        self, run_id: str, *, free_slots: bool = True, result: Any = None
    ) -> None:
        """The worker holding the run's lease records its success (``result``, kept in the
        payload bucket when it is large), which frees its slots, then wakes the oldest run
        waiting for each; it dies before resuming the runs waiting for this one.
        ``free_slots=False``: the write leaves them held, as a bug would (a leaked holder
        for maintenance to drop)."""
        run = self.setup.runs.get(run_id)
        assert run.lease is not None
        success = machine.record_success(
            run if free_slots else run.with_changes(slots=()),
            token=run.lease.token,
            result=self.setup.engine.values.seal(
                result, what="result", place=ValuePlace(Holder.RUN, run.id, ValueField.RESULT)
            ).value,
            now=self.clock.now(),
        )
        self.setup.store.apply(success)
        if free_slots:
            self.setup.engine.slot_waker.wake(slot.scope for slot in run.slots)

    def run_worker_with_foreign_wakeups(self) -> None:
        """Start a long-running worker (it unparks the parked runs it can run) while each
        queue holds a wakeup of another environment; stop it once it has handed both
        back."""
        urls = self.queue_urls
        other = Runlane.from_env(clock=self.clock, environment="other", queue_urls=urls)
        register(other)
        for task in (OK, ORDERED):
            other.trigger(task, "not for this worker")
        worker = self.worker.worker(["default", "ordered"], worker_id="ecs", wait_seconds=1)
        thread = threading.Thread(target=worker.run)
        thread.start()
        requests = self.recorder.requests[WORKER]
        handed_back = set(urls.values())
        wait_until(
            lambda: (
                handed_back
                <= {p["QueueUrl"] for o, p in list(requests) if o == "ChangeMessageVisibilityBatch"}
            ),
            timeout=30,
            what="the worker to hand back the other environment's wakeups",
        )
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
        # the other environment's worker takes them: from the queue, or from its dead-letter
        # queue once handed back more often than the redrive policy allows (a slow machine)
        transport = self.setup.transport
        for queue, url in urls.items():
            for where in (url, transport.dead_letter_url(queue)):  # type: ignore[attr-defined]
                for message in self.sqs.receive_message(QueueUrl=where, MaxNumberOfMessages=10).get(
                    "Messages", []
                ):
                    self.sqs.delete_message(QueueUrl=where, ReceiptHandle=message["ReceiptHandle"])

    def status(self, run_id: str) -> RunStatus:
        return self.setup.runs.get(run_id).status

    def slot_wait(self, run_id: str) -> str | None:
        return self.setup.runs.get(run_id).slot_wait

    def holders(self, scope: str) -> int:
        state = self.setup.store.slots.get_slot(scope)
        return len(state.holders) if state is not None else 0

    def stored_objects(self, run_id: str) -> set[Reference]:
        """The payload bucket's objects a run references, as stored."""
        return set(run_references(self.setup.runs.get_stored(run_id)))

    def object_exists(self, reference: Reference) -> bool:
        objects = self.setup.objects
        assert objects is not None
        return objects.get(reference.key, reference.size) is not None

    def waiting_on(self, run_id: str) -> str:
        waiting = self.setup.runs.get(run_id).waiting
        assert waiting is not None and waiting.target is not None
        return waiting.target


def play(c: Components) -> None:
    """Every component's calls, in the order a deployment makes them."""
    runs = trigger(c)
    work_and_decide(c, runs)
    work_elsewhere(c)
    operate(c, runs)
    maintain(c, runs)
    limit_concurrency(c)
    limit_rates(c)
    debounce_triggers(c)
    batch_items(c)
    order_runs(c)
    large = keep_large_values(c)
    cursor = None  # last, the operator prunes what is finished
    while (pruned := c.operator.runs.prune(older_than=timedelta(0), cursor=cursor)).cursor:
        cursor = pruned.cursor
    delete_released_objects(c, large)


def trigger(c: Components) -> dict[str, Run]:
    """The producer triggers every kind of run; tokens may be created before triggering."""
    producer = c.producer
    runs = {
        "ok": producer.trigger(OK, {"n": 1}),
        "ordered": producer.trigger(ORDERED, {"n": 1}),
        "keyed": producer.trigger(
            OK, "keyed", idempotency_key="order-7", singleton_key="customer-7"
        ),
        "later": producer.trigger(OK, "later", delay=timedelta(hours=2)),
        "ordered later": producer.trigger(ORDERED, "later", delay=timedelta(hours=2)),
        "flaky": producer.trigger(FLAKY),
        "broken": producer.trigger(BROKEN),
        "keyed broken": producer.trigger(
            BROKEN, idempotency_key="broken-1", tags={"team": "billing"}
        ),
        "released": producer.trigger(LATER),
        "signal": producer.trigger(SIGNAL, {"key": "payment:7"}),
        "worker's token": producer.trigger(TOKEN, {}),
        "token timing out": producer.trigger(TOKEN, {}),
        "parent": producer.trigger(PARENT, {}),
        "slow": producer.trigger(SLOW),
        "parked": producer.trigger(ELSEWHERE, 1),
        "parked too": producer.trigger(ELSEWHERE, 2),
    }
    producer.trigger_many(OK, [{"n": n} for n in range(3)])
    assert not producer.trigger(OK, "again", idempotency_key="order-7").created
    assert not producer.trigger(OK, "again", singleton_key="customer-7").created
    made = producer.tokens.create(metadata={"for": "a reviewer"})
    assert producer.tokens.get(made.id).id == made.id
    runs["producer's token"] = producer.trigger(TOKEN, {"token": made.id})
    runs["blocked"] = producer.trigger(OK, "b", singleton_key="b", delay=timedelta(hours=3))
    runs["blocked parent"] = producer.trigger(PARENT, {"child": runs["blocked"].id})
    # Two runs whose worker died: one to cancel, one past its attempt deadline.
    runs["victim"] = producer.trigger(OK, "victim", singleton_key="victim")
    c.forge_lease(runs["victim"].id)
    producer.trigger(PARENT, {"child": runs["victim"].id})
    runs["overdue"] = producer.trigger(OK, "overdue", idempotency_key="overdue")
    c.forge_lease(runs["overdue"].id, deadline=timedelta(seconds=30))
    return runs


def work_and_decide(c: Components, runs: dict[str, Run]) -> None:
    """The long-running worker drains; the producer decides what runs wait for."""
    producer = c.producer
    c.drain()
    assert c.status(runs["signal"].id) is RunStatus.RELEASED
    assert c.status(runs["blocked parent"].id) is RunStatus.RELEASED
    assert c.status(runs["parked"].id) is RunStatus.PARKED
    assert producer.signals.send("payment:7", {"paid": True}) == 1
    producer.tokens.complete(c.waiting_on(runs["producer's token"].id), {"approved": True})
    producer.tokens.complete(c.waiting_on(runs["worker's token"].id), {"approved": False})
    assert producer.runs.wait(runs["ok"].id, timeout=1).status is RunStatus.SUCCEEDED
    assert producer.trigger(OK, "after", singleton_key="customer-7").created  # key freed
    assert producer.trigger(BROKEN, idempotency_key="broken-1").created  # key freed
    c.drain()
    for name in ("signal", "producer's token", "worker's token", "flaky", "parent"):
        assert c.status(runs[name].id) is RunStatus.SUCCEEDED, name


def work_elsewhere(c: Components) -> None:
    """The async worker, the Lambda consumer, and a long-running worker starting up."""
    producer = c.producer
    by_async = [producer.trigger(FLAKY), producer.trigger(OK, "a", singleton_key="async")]
    by_async.append(producer.trigger(LATER))
    while c.drain_async():
        pass
    consumed = [producer.trigger(t, {}) for t in (OK, FLAKY, LATER, PARENT)]
    consumed.append(producer.trigger(OK, "lambda", singleton_key="lambda"))
    producer.trigger(ORDERED)
    while c.deliver():
        pass
    assert all(c.status(r.id) is RunStatus.SUCCEEDED for r in (*by_async, *consumed))
    c.run_worker_with_foreign_wakeups()


def operate(c: Components, runs: dict[str, Run]) -> None:
    """The operator observes and recovers."""
    operator = c.operator
    assert operator.runs.list(limit=100).runs
    assert operator.runs.list(status="failed", task=BROKEN).runs
    tagged = operator.runs.list(tags={"team": "billing"}).runs  # docs/tags.md
    assert [run.id for run in tagged] == [runs["keyed broken"].id]
    assert operator.runs.get(runs["keyed"].id).status is RunStatus.SUCCEEDED
    operator.runs.events(runs["keyed"].id)
    operator.runs.attempts(runs["flaky"].id)
    assert operator.runs.wait(runs["keyed"].id, timeout=1).status is RunStatus.SUCCEEDED
    assert operator.runs.find_current(OK, "order-7") is not None
    assert operator.runs.find_active(OK, "victim") is not None
    operator.runs.cancel(runs["blocked"].id, reason="not needed")  # resumes its waiter
    operator.runs.cancel(runs["victim"].id, reason="stuck")  # running: cancel requested
    operator.runs.retry(runs["broken"].id, reason="fixed")
    operator.runs.rerun(runs["ordered"].id)
    operator.runs.unpark(runs["parked"].id)
    token = operator.tokens.create(timeout=timedelta(days=1))
    operator.tokens.get(token.id)
    operator.tokens.complete(token.id, "yes")
    operator.tokens.time_out(operator.tokens.create().id)
    operator.signals.send("nobody-waits")
    operator.idempotency.reset(OK, "order-7")
    operator.trigger(OK, "by hand", idempotency_key="by-hand", singleton_key="by-hand")
    assert operator.schedules.get(SCHEDULE).status is ScheduleStatus.ACTIVE  # stored now
    assert [s.id for s in operator.schedules.list()] == [SCHEDULE]
    operator.schedules.pause(SCHEDULE)
    operator.schedules.resume(SCHEDULE)
    assert operator.schedules.trigger_now(SCHEDULE).schedule_id == SCHEDULE
    # a bulk operation: counted, started, carried out, read and listed
    rerun_nothing = BulkFilter(task=OK, failure_type="NoSuchError")
    counted = operator.bulk.count("rerun", rerun_nothing)
    bulk = operator.bulk.start("rerun", rerun_nothing, counted=counted)
    assert operator.bulk.run(bulk.id).status is OperationStatus.DONE
    assert [o.id for o in operator.bulk.list().operations] == [bulk.id]
    # never carried out: maintenance does, selecting its runs by tag
    operator.bulk.start("retry", BulkFilter(task=BROKEN, tags={"team": "billing"}))
    c.drain()
    assert operator.health.activity().counts  # the console's runs page
    checked = operator.health.check()  # its health page
    assert {q.name for q in checked.queues if q.dead_letters is not None} == {"default", "ordered"}
    # a wakeup that reached each dead-letter queue: listed, then redriven (its run is done)
    settled = Wakeup.for_run(operator.runs.get_stored(runs["ok"].id), c.clock.now()).to_json()
    for queue in ("default", "ordered"):
        dead_letters = operator.transport.dead_letter_url(queue)  # type: ignore[attr-defined]
        fifo = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if queue == "ordered" else {}
        c.sqs.send_message(QueueUrl=dead_letters, MessageBody=settled, **fifo)
        listed = operator.dead_letters.list(queue)
        assert [letter.verdict for letter in listed] == [Verdict.SETTLED], listed
        assert operator.dead_letters.redrive(queue).settled == 1


def maintain(c: Components, runs: dict[str, Run]) -> None:
    """Maintenance passes: due runs, the abandoned cancellation, the attempt deadline, a
    token timeout, a parked run, a schedule's occurrences; then saved cursors."""
    maintenance = c.maintenance.maintenance
    c.clock.advance(timedelta(hours=5))
    (orphaned,) = c.setup.bulk.list(limit=1).operations  # the operator's, left running
    report = maintenance.run_pass()
    assert report.jobs["due_wakeups"].published >= 2, report
    assert report.jobs["abandoned_cancellations"].acted == 1, report
    assert report.jobs["attempt_deadlines"].acted == 1, report
    assert report.jobs["tokens"].acted >= 1, report
    assert report.jobs["parked_runs"].acted >= 1, report
    assert report.jobs["schedules"].acted == 1, report  # the latest of five missed hours
    assert report.jobs["bulk_operations"].acted == 1, report
    assert c.setup.bulk.get(orphaned.id).status is OperationStatus.DONE
    c.drain()
    for name in ("later", "ordered later", "token timing out"):
        assert c.status(runs[name].id) is RunStatus.SUCCEEDED, name
    assert c.status(runs["victim"].id) is RunStatus.CANCELLED
    assert c.status(runs["overdue"].id) is RunStatus.FAILED
    # Cursors: the agenda partitions hold more than a pass reads (one run each): more
    # runs than partitions put two in at least one of them.
    for n in range(AGENDA_SHARDS + 8):
        c.producer.trigger(OK, n, delay=timedelta(hours=2))
    c.clock.advance(timedelta(hours=3))
    maintenance.bounds = MaintenanceConfig(limit_per_job=AGENDA_SHARDS)
    while maintenance.run_pass().cursors:
        pass


def limit_concurrency(c: Components) -> None:
    """Concurrency limits (the FIFO queue runs one run at a time, ``KEYED`` one per
    customer). Another worker holds the queue's slot and a run left the customer's slot
    held (a leaked holder); runs that find either taken wait. The operator lists the
    limits and cancels a waiting run. The other worker's success wakes the oldest waiter;
    its attempt here, ending, wakes the next. Then a worker dies holding the queue's slot:
    maintenance recovers its lease (freeing the slot) and drops the leaked holder, and
    wakes the run waiting for each."""
    producer = c.producer
    c.drain()  # what maintenance published last
    held = producer.trigger(ORDERED, "held")
    c.forge_lease(held.id, owner="another-worker")
    leaked = producer.trigger(KEYED, {"customer": "acme", "n": 0})
    c.forge_lease(leaked.id, owner="another-worker")
    c.succeed_elsewhere(leaked.id, free_slots=False)
    waiting = [producer.trigger(ORDERED, n) for n in range(3)]
    blocked = producer.trigger(KEYED, {"customer": "acme", "n": 1})
    assert c.drain() == 0
    assert [c.slot_wait(r.id) for r in waiting] == [ORDERED_SCOPE] * 3
    assert c.slot_wait(blocked.id) == KEYED_SCOPE
    listed = {o.scope: (o.limit, o.holding, o.waiting) for o in c.operator.queues.list()}
    assert listed == {
        queue_scope("default"): (None, 0, 0),
        ORDERED_SCOPE: (1, 1, 3),
        KEYED_SCOPE: (1, 1, 1),
    }, listed
    c.operator.runs.cancel(waiting[2].id, reason="not needed")
    # Later than the triggers: a FIFO queue drops a wakeup requested at the same instant
    # as the run's last (its deduplication id).
    c.clock.advance(timedelta(seconds=1))
    c.succeed_elsewhere(held.id)  # wakes the oldest waiter
    assert c.drain() == 2  # whose end here wakes the other
    for run in (held, *waiting[:2]):
        assert c.status(run.id) is RunStatus.SUCCEEDED
    assert c.status(waiting[2].id) is RunStatus.CANCELLED
    # A dead worker's limited run, and maintenance.
    dead = producer.trigger(ORDERED, "dead")
    c.forge_lease(dead.id)
    behind = producer.trigger(ORDERED, "behind the dead")
    assert c.drain() == 0
    assert c.slot_wait(behind.id) == ORDERED_SCOPE
    c.clock.advance(timedelta(minutes=1, seconds=1))  # both forged leases have expired
    maintenance = c.maintenance.maintenance
    maintenance.bounds = MaintenanceConfig()
    report = maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 1, report
    assert report.jobs[JOB_SLOTS].repaired == 1, report
    assert c.slot_wait(behind.id) is None and c.slot_wait(blocked.id) is None
    assert c.drain() == 3
    for run in (dead, behind, blocked):
        assert c.status(run.id) is RunStatus.SUCCEEDED
    assert c.holders(ORDERED_SCOPE) == c.holders(KEYED_SCOPE) == 0


def limit_rates(c: Components) -> None:
    """A rate limit of one start a second: of two runs, the second waits for its reserved start,
    its message held by the worker until then (the test's clock moves on as the worker
    waits); the consumer cannot hold one, so it publishes the waiting run's wakeup and
    runs it when that is delivered."""
    runs = [c.producer.trigger(RATED, n) for n in range(2)]
    assert c.drain() == 2
    c.clock.advance(timedelta(seconds=5))
    runs += [c.producer.trigger(RATED, n) for n in range(2, 4)]
    assert c.deliver() == 3  # the second run's wakeup comes back
    assert all(c.status(run.id) is RunStatus.SUCCEEDED for run in runs)
    (state,) = c.operator.queues.rates()
    assert state.reserved_ahead >= 0 and state.stored_matches
    # the limit was one start a minute before this deploy: maintenance drops the starts
    # reserved ahead and wakes the runs sleeping for them
    c.setup.store.progress.save_rate_limits({state.scope: (60_000_000, 0)})
    c.producer.trigger(RATED, "before the deploy")
    assert c.drain() == 1
    assert JOB_RATES in c.maintenance.maintenance.run_pass().jobs


def batch_items(c: Components) -> None:
    """Two items fill a batch of two: the producer reads the key, creates the run and
    claims the key, reads the key again, appends the second item and makes the batch due
    (sending its wakeup); the worker runs it with both items."""
    first = c.producer.trigger(BATCHED, {"n": 1})
    second = c.producer.trigger(BATCHED, {"n": 2})
    assert (second.id, second.item) == (first.id, 1)
    assert c.drain() == 1
    assert c.operator.runs.get(first.id).result == 2


def debounce_triggers(c: Components) -> None:
    """A debounced key triggered twice: the producer reads the key, creates the run and
    claims the key, then reads the key and the run again and merges into the run."""
    first = c.producer.trigger(DEBOUNCED, {"key": "k", "items": [1]})
    second = c.producer.trigger(DEBOUNCED, {"key": "k", "items": [2]})
    assert second.id == first.id and not second.created
    stored = c.operator.runs.get(first.id)
    assert (stored.collapsed, stored.payload["items"]) == (1, [1, 2])


def order_runs(c: Components) -> None:
    """Ordered runs: the producer takes places, the operator cancels a waiting run and
    reruns a finished one, the worker and the consumer hand turns on; a worker dies past
    its attempt deadline: maintenance's timeout ends the run, hands the turn on, and a
    later pass checks the order record that write listed."""
    producer = c.producer
    first, second, third = (producer.trigger(OK, n, ordering_key="acct-1") for n in range(3))
    c.operator.runs.cancel(third.id, reason="not needed")
    assert c.drain() == 2
    c.operator.runs.rerun(first.id)
    assert c.drain() == 1
    consumed = [producer.trigger(OK, n, ordering_key="acct-2") for n in range(2)]
    while c.deliver():
        pass
    for run in (first, second, *consumed):
        assert c.status(run.id) is RunStatus.SUCCEEDED
    overdue = producer.trigger(OK, "overdue", ordering_key="acct-3")
    behind = producer.trigger(OK, "behind", ordering_key="acct-3")
    c.forge_lease(overdue.id, deadline=timedelta(seconds=30))
    c.clock.advance(timedelta(minutes=1, seconds=1))
    maintenance = c.maintenance.maintenance
    assert maintenance.run_pass().jobs["attempt_deadlines"].acted == 1
    assert c.status(overdue.id) is RunStatus.FAILED
    assert c.drain() == 1
    assert c.status(behind.id) is RunStatus.SUCCEEDED
    c.clock.advance(TURN_CHECK_AFTER)
    assert maintenance.run_pass().jobs[JOB_SLOTS].examined >= 1


def keep_large_values(c: Components) -> set[str]:
    """Values over the inline limit, kept in the payload bucket: the producer triggers
    with a large payload (again, with the same idempotency key: its pin lists the object's
    record, which no new run came to hold) and reads the large result; the workers and the
    consumer read payloads and write results; the operator reads a run, triggers by hand
    and reruns one. A run's child succeeds with a large result, but the worker that ran it died
    before resuming the parent: maintenance reads the result and writes the parent's wait
    result. Maintenance then takes the idempotent retry's pin off the agenda. Returns the
    keys of the objects the runs reference."""
    producer, operator = c.producer, c.operator
    big = producer.trigger(LARGE, blob(100 * KIB, "big"), idempotency_key="big-1")
    assert isinstance(c.setup.runs.get_stored(big.id).payload, Sealed)
    again = producer.trigger(LARGE, blob(100 * KIB, "big"), idempotency_key="big-1")
    assert not again.created
    child = producer.trigger(LARGE, blob(50 * KIB, "child"))
    c.forge_lease(child.id, owner="another-worker")
    parent = producer.trigger(PARENT, {"child": child.id})
    assert c.drain() == 2  # the large run, and the parent that now waits
    assert producer.runs.wait(big.id, timeout=1).result == {
        "back": blob(100 * KIB, "big")["blob"][::-1]
    }
    by_async = producer.trigger(LARGE, blob(70 * KIB, "async"))
    while c.drain_async():
        pass
    consumed = producer.trigger(LARGE, blob(60 * KIB, "consumed"))
    while c.deliver():
        pass
    assert c.status(by_async.id) is c.status(consumed.id) is RunStatus.SUCCEEDED
    assert operator.runs.get(big.id).payload == blob(100 * KIB, "big")
    by_hand = operator.trigger(LARGE, blob(40 * KIB, "by hand"))
    rerun = operator.runs.rerun(consumed.id)  # holds the same payload object
    assert c.drain() == 2
    assert c.status(by_hand.id) is c.status(rerun.id) is RunStatus.SUCCEEDED
    c.succeed_elsewhere(child.id, result=blob(80 * KIB, "child's result"))
    c.clock.advance(PIN_DURATION + timedelta(seconds=1))
    report = c.maintenance.maintenance.run_pass()
    assert report.jobs[JOB_WAITS].acted == 1, report
    # The retry's pinned record: held again (off the agenda); with a KMS codec, whose
    # encryption differs each time, its object is another, unreferenced (deleted).
    objects = report.jobs[JOB_OBJECTS]
    assert objects.skipped + objects.acted >= 1, report
    assert c.drain() == 1
    assert c.status(parent.id) is RunStatus.SUCCEEDED
    runs = (big, child, parent, by_async, consumed, by_hand, rerun)
    held = {reference for run in runs for reference in c.stored_objects(run.id)}
    assert all(c.object_exists(reference) for reference in held)
    return held


def delete_released_objects(c: Components, held: set[Reference]) -> None:
    """After the operator pruned the runs, and the grace, maintenance deletes the objects
    no record references any more."""
    c.clock.advance(RELEASE_GRACE + timedelta(seconds=1))
    report = c.maintenance.maintenance.run_pass()
    assert report.jobs[JOB_OBJECTS].acted >= len(held), report
    assert not any(c.object_exists(reference) for reference in held)


@dataclass(frozen=True)
class Role:
    """A component's role: the policies it attaches (its own last) and the components
    whose requests they must allow."""

    policies: tuple[str, ...]
    components: tuple[str, ...]


ROLES = {
    "producer": Role(("ProducerPolicy",), (PRODUCER,)),
    "worker": Role(("ProducerPolicy", "WorkerPolicy"), (WORKER, CONSUMER)),
    "maintenance": Role(("MaintenancePolicy",), (MAINTENANCE,)),
    "operator": Role(("OperatorPolicy",), (OPERATOR,)),
}
"""The worker's and the consumer's task code triggers runs, sends signals and decides
tokens as a producer does: their roles attach ``ProducerPolicy`` too."""


PAYLOAD_KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ENCRYPTIONS = {"sse-s3": {}, "sse-kms": {"PayloadKeyArn": PAYLOAD_KEY_ARN}}
"""The payload bucket's encryption -> the template parameters that choose it."""


CODECS = ("none", "kms")
"""How the apps store values: as they are, or encrypted by a ``KmsEncryption`` codec
whose key is the template's ``ValueKeyArn`` (each component plays once with each)."""


@dataclass(frozen=True)
class Played:
    """One play of every component."""

    needs: dict[str, set[Access]]
    """Component -> what its requests needed."""
    values: Values
    """The template's values for the play's app, its parameters at their defaults."""
    value_key: str | None = None
    """The ARN of the ``KmsEncryption`` codec's key, when the apps had one."""


@dataclass(frozen=True)
class Recorded:
    plays: dict[str, Played]
    """Codec (``CODECS``) -> the play with it."""
    template: dict[str, Any]

    @property
    def needs(self) -> dict[str, set[Access]]:
        return self.plays["none"].needs

    @property
    def values(self) -> Values:
        return self.plays["none"].values

    def of(self, role: Role, encryption: str = "sse-s3", codec: str = "none") -> set[Access]:
        """What the role's components needed in the play with ``codec``; with SSE-KMS,
        also the key's uses S3 made for them."""
        played = self.plays[codec].needs
        needs = {a for component in role.components for a in played[component]}
        if ENCRYPTIONS[encryption]:
            needs |= through_key(needs, PAYLOAD_KEY_ARN)
        return needs

    def policy(
        self, *names: str, encryption: str = "sse-s3", codec: str = "none", **parameters: str
    ) -> list[dict[str, Any]]:
        """The statements of the policies ``names``, for the bucket's ``encryption``, the
        play with ``codec`` (``ValueKeyArn`` its key) and the template ``parameters``
        given."""
        played = self.plays[codec]
        key = {"ValueKeyArn": played.value_key} if played.value_key else {}
        chosen = {**played.values.parameters, **ENCRYPTIONS[encryption], **key, **parameters}
        return statements(self.template, replace(played.values, parameters=chosen), *names)
