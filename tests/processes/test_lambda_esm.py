"""The Lambda consumer behind a simulated SQS event source mapping (tests/esm/), on a
standard and on a FIFO queue of the emulators.

Every invocation is a process of its own, killed at the function's timeout; batches are
partially reported, some are invoked twice at once, some invocations are killed (a task
sleeping past the timeout) or crash (a task killing its process), some attempts fail and
retry, and malformed wakeups are mixed in. Maintenance runs every few seconds. The runs
must all end as their tasks dictate, none succeeding twice and none executed again after
its success, the FIFO queue's order must hold, the runs of each ordering key (a third of
the runs) must execute one at a time in trigger order, and every run an invocation left
behind must be recovered before the deadline.

Both queues get a visibility timeout far longer than the deadline: recovery must come
from lease expiry and maintenance's republished wakeups, never from a stranded message
becoming visible again. The figures printed (time to recovery, requests per run) are in
docs/deploy-lambda.md, "Simulated event source mapping"; nothing here asserts a timing.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Run, Runlane, RunStatus
from runlane_sqs.adapters.provision import provision_queues, provision_table
from runlane_sqs.lambdas.deadline import ENV_SAFETY_MARGIN_SECONDS
from tests.apps.esm_tasks import (
    BROKEN,
    CRASHES_FIRST,
    DIES_FIRST,
    FLAKY,
    HANGS_FIRST,
    LEDGER_ENV,
    OUTCOMES,
    QUEUE_KIND_ENV,
    QUEUES,
    QUICK,
    Execution,
    read_ledger,
    register_esm,
    task_name,
)
from tests.aws_local import AWS_LOCAL
from tests.emulators import TEST_BACKEND, count_requests, subprocess_env, wait_until
from tests.esm.fifo import FifoOrder
from tests.esm.figures import figures
from tests.esm.invocation import CRASHED, KILLED, RETURNED, Invocation, LambdaFunction
from tests.esm.maintenance import MaintenanceLoop
from tests.esm.mapping import EventSourceMapping, MappingConfig
from tests.esm.records import deletable, reported_ids
from tests.esm.recovery import KILLED_ATTEMPT, Recovery, recoveries
from tests.wakeups import forged_bodies

RUNS = 150 if TEST_BACKEND == AWS_LOCAL else 80
"""On the moto server, which handles one request at a time, fewer runs keep the file
within a minute or so of the suite's time; DynamoDB Local + LocalStack take all 150."""
MIX = {HANGS_FIRST: 3, CRASHES_FIRST: 3, FLAKY: 12, BROKEN: 6}
"""Runs of each kind but ``QUICK``, which makes up the rest."""
FUNCTION_TIMEOUT_SECONDS = 12.0
SAFETY_MARGIN_SECONDS = 2.0
"""The timeout leaves the 10 s the consumer wants past its margin
(runlane_sqs.lambdas.deadline.MIN_WORKING_SECONDS)."""
VISIBILITY_TIMEOUT_SECONDS = 900
"""Far beyond the deadline: a run that waits for a stranded message to become visible
again does not finish in time."""
DEADLINE_SECONDS = 240.0
"""A bound on liveness, not a figure (those are printed): every invocation is a fresh
interpreter, which a machine shared with the rest of the suite starts several times more
slowly than an idle one."""
LEASE_SECONDS = 3
REPUBLISH_AFTER_SECONDS = 5
REPUBLISH_MAX_SECONDS = 10
"""A run whose wakeups keep landing in dying invocations is republished every 10 s at
most (the doubling would otherwise reach the deadline)."""
MAINTENANCE_PERIOD_SECONDS = 2.5
MAPPING = MappingConfig(concurrency=4, duplicate_fraction=0.2)
SEED = 17
POLL_SECONDS = 0.5
TRIGGERS_PER_SECOND = 10
ORDERING_KEYS = 3
"""Every third run is triggered with one of these ordering keys, five in a row with the
same one (so later ones are triggered behind unfinished ones): each key's runs must
execute one at a time in trigger order, through kills, crashes and retries."""


def ordering_key(n: int) -> str | None:
    return f"account-{(n // 15) % ORDERING_KEYS}" if n % 3 == 0 else None


@dataclass
class Lane:
    """One queue kind's apps and queue: the test's own app (reads runs), the producer's
    and maintenance's (each with its requests counted)."""

    kind: str
    url: str
    app: Runlane
    producer: Runlane
    maintenance: Runlane


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ledger"
    folder.mkdir()
    monkeypatch.setenv(LEDGER_ENV, str(folder))
    return folder


def provision(kind: str, make_app: Callable[..., Runlane], monkeypatch: Any) -> Lane:
    """The table and the kind's queue (FIFO: ``ordered`` named by URL, as the template
    does) with the long visibility timeout; the variables every app (and every
    invocation) reads; then the test's three apps."""
    for name, value in {
        "RUNLANE_LEASE_SECONDS": LEASE_SECONDS,
        "RUNLANE_REPUBLISH_AFTER_SECONDS": REPUBLISH_AFTER_SECONDS,
        "RUNLANE_REPUBLISH_MAX_SECONDS": REPUBLISH_MAX_SECONDS,
        ENV_SAFETY_MARGIN_SECONDS: SAFETY_MARGIN_SECONDS,
        QUEUE_KIND_ENV: kind,
    }.items():
        monkeypatch.setenv(name, str(value))
    probe = make_app()
    sqs = probe.client("sqs")
    provision_table(probe.client("dynamodb"), probe.config.table)
    name = probe.config.sqs_queue_name(QUEUES[kind]) + (".fifo" if kind == "fifo" else "")
    url = provision_queues(sqs, [name])[name]
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT_SECONDS)}
    )
    monkeypatch.setenv("RUNLANE_QUEUE_URLS", f"{QUEUES[kind]}={url}")
    apps = [register_esm(make_app(), kind) for _ in range(3)]
    return Lane(kind, url, *apps)


def plan(kind: str) -> list[str]:
    kinds = [k for k, n in MIX.items() for _ in range(n)]
    kinds += [QUICK] * (RUNS - len(kinds))
    random.Random(SEED).shuffle(kinds)
    return [task_name(kind, k) for k in kinds]


def send_forged(lane: Lane, run_id: str) -> list[str]:
    """Malformed and stale wakeups on the lane's queue; returns their message ids."""
    sqs = lane.app.client("sqs")
    ids = []
    for n, body in enumerate(forged_bodies(run_id, lane.app.config.environment).values()):
        fifo = {"MessageGroupId": f"forged-{n}", "MessageDeduplicationId": f"forged-{n}"}
        extra = fifo if lane.kind == "fifo" else {}
        ids.append(sqs.send_message(QueueUrl=lane.url, MessageBody=body, **extra)["MessageId"])
    return ids


def trigger_steadily(lane: Lane, tasks: list[str]) -> tuple[list[Run], list[str]]:
    """Trigger the runs ``TRIGGERS_PER_SECOND`` at a time while the mapping works (a
    steady load rather than a backlog, whose runs maintenance would republish once they
    waited ``REPUBLISH_AFTER_SECONDS`` in the queue), the forged wakeups after the first
    run. Returns the runs and the forged messages' ids."""
    runs = [lane.producer.trigger(tasks[0], {"n": 0}, ordering_key=ordering_key(0))]
    forged = send_forged(lane, runs[0].id)
    start = time.monotonic()
    for n, task in enumerate(tasks[1:], start=1):
        pause = start + n / TRIGGERS_PER_SECOND - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing real processes: no clock to move
        runs.append(lane.producer.trigger(task, {"n": n}, ordering_key=ordering_key(n)))
    return runs, forged


def all_finished(app: Runlane, runs: list[Run]) -> Callable[[], bool]:
    """A check of the runs in order, reading until the first unfinished one, at most
    every ``POLL_SECONDS`` (the reads share the emulator with the function)."""
    pending = [run.id for run in runs]
    last = [0.0]

    def check() -> bool:
        if time.monotonic() - last[0] < POLL_SECONDS:
            return False
        last[0] = time.monotonic()
        while pending:
            if not app.runs.get(pending[0]).is_terminal:
                return False
            pending.pop(0)
        return True

    return check


@pytest.fixture
def function(
    backend_env: dict[str, str], ledger: Path, tmp_path: Path
) -> Callable[[], LambdaFunction]:
    """The consumer function, built once the test has set its variables."""

    def build() -> LambdaFunction:
        return LambdaFunction(
            app="tests.apps.esm_app:app",
            handler="tests.apps.esm_app:handler",
            timeout_seconds=FUNCTION_TIMEOUT_SECONDS,
            env=subprocess_env(backend_env),
            work_dir=tmp_path / "invocations",
        )

    return build


@pytest.mark.timeout(DEADLINE_SECONDS + 60)
@pytest.mark.parametrize("kind", ["standard", "fifo"])
def test_runs_behind_a_simulated_event_source_mapping_end_once_and_recover(
    kind: str,
    make_app: Callable[..., Runlane],
    function: Callable[[], LambdaFunction],
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lane = provision(kind, make_app, monkeypatch)
    produced = {s: count_requests(lane.producer.client(s)) for s in ("dynamodb", "sqs")}
    tasks = plan(kind)
    began = time.monotonic()
    with (
        MaintenanceLoop(lane.maintenance, MAINTENANCE_PERIOD_SECONDS) as maintenance,
        EventSourceMapping(lane.url, function(), MAPPING) as mapping,
    ):
        runs, forged = trigger_steadily(lane, tasks)
        try:
            wait_until(all_finished(lane.app, runs), DEADLINE_SECONDS, "every run to end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {unfinished(lane.app, runs, mapping)}") from None
        elapsed = time.monotonic() - began
    executions = read_ledger(ledger)
    finals = {run.id: lane.app.runs.get(run.id) for run in runs}
    found = recoveries(mapping.batches, executions, {r: f.attempt for r, f in finals.items()})

    assert mapping.errors == [] and maintenance.errors == []
    check_outcomes(lane.app, dict(zip(finals, tasks, strict=True)), finals, executions)
    check_ledger(executions, finals)
    check_deaths(
        mapping, executions, found, [r.id for r, t in zip(runs, tasks, strict=True) if dies(t)]
    )
    check_forged(mapping, forged)
    check_ordering(lane.app, runs, executions)
    assert any(b.duplicated and len(b.invocations) == 2 for b in mapping.batches)
    if mapping.order is not None:
        assert mapping.order.violations == []

    headline = f"{kind} queue on {TEST_BACKEND}: {RUNS} runs, all ended {elapsed:.1f} s"
    print(f"\n{headline} after the first trigger")
    print("\n".join(figures(lane.app, mapping, maintenance, produced, found, RUNS)))


def dies(task: str) -> bool:
    return task.rsplit(".", 1)[-1] in DIES_FIRST


def unfinished(app: Runlane, runs: list[Run], mapping: EventSourceMapping) -> str:
    left = [app.runs.get(r.id) for r in runs]
    left = [r for r in left if not r.is_terminal]
    shown = ", ".join(f"{r.task} {r.status.value} attempt {r.attempt}" for r in left[:10])
    return f"{len(left)} unfinished ({shown}); invocations {dict(mapping.outcomes())}"


def history_of(executions: list[Execution]) -> dict[str, list[Execution]]:
    by_run: dict[str, list[Execution]] = {}
    for execution in executions:
        by_run.setdefault(execution.run_id, []).append(execution)
    return by_run


def check_outcomes(
    app: Runlane, tasks: dict[str, str], finals: dict[str, Run], executions: list[Execution]
) -> None:
    """No run lost: each ended as its task dictates, as the same run; each execution that
    died with its invocation cost the run one lease expiry and nothing else; every other
    attempt was executed, or given back unrun (``before_start``)."""
    by_run = history_of(executions)
    assert set(by_run) == set(finals), "a run was never executed"
    for run_id, run in finals.items():
        kind = tasks[run_id].rsplit(".", 1)[-1]
        history = by_run[run_id]
        ended = [e.outcome for e in history if e.outcome is not None]
        died = len(history) - len(ended)
        status = RunStatus.FAILED if kind == BROKEN else RunStatus.SUCCEEDED
        assert (run.status, ended) == (status, OUTCOMES[kind]), (tasks[run_id], run_id, history)
        if died == 0 and run.attempt == len(history):
            continue
        events = app.runs.events(run_id)
        expired = [e for e in events if e.type is EventType.LEASE_EXPIRED]
        given_back = [e for e in expired if e.data.get("before_start")]
        assert len(expired) - len(given_back) == died, (tasks[run_id], events)
        assert run.attempt == len(history) + len(given_back), (tasks[run_id], events)


def check_ledger(executions: list[Execution], finals: dict[str, Run]) -> None:
    """At most one successful execution per run (one for each succeeded run), none after
    it, and no attempt executed twice."""
    for run_id, history in history_of(executions).items():
        attempts = Counter(e.attempt for e in history)
        assert [a for a, n in attempts.items() if n > 1] == [], (run_id, history)
        successes = [i for i, e in enumerate(history) if e.succeeded]
        succeeded = finals[run_id].status is RunStatus.SUCCEEDED
        assert len(successes) == (1 if succeeded else 0), (run_id, history)
        if successes:
            assert successes[0] == len(history) - 1, f"{run_id} executed after its success"
            assert history[-1].attempt == finals[run_id].attempt


def check_ordering(app: Runlane, runs: list[Run], executions: list[Execution]) -> None:
    """Each ordering key's runs executed one at a time in trigger order: every execution
    of a run began after the last execution of the key's run before it ended, and each
    run triggered behind another reached its turn."""
    by_run = history_of(executions)
    lines: dict[str, list[str]] = {}
    for run in runs:
        if run.ordering_key is not None:
            lines.setdefault(run.ordering_key, []).append(run.id)
    assert len(lines) == ORDERING_KEYS
    for key, line in lines.items():
        for before, after in itertools.pairwise(line):
            ended = max(e.ended_at for e in by_run[before] if e.ended_at is not None)
            started = min(e.started_at for e in by_run[after])
            assert ended <= started, (key, before, after, by_run[before], by_run[after])
    waited = 0
    for run in runs:
        if run.ordering_key is None:
            continue
        events = app.runs.events(run.id)
        if events[0].data.get("behind"):
            waited += 1
            assert EventType.TURN_REACHED in {e.type for e in events}, (run.id, events)
    assert waited >= ORDERING_KEYS, "no run of a key was triggered behind another"


def check_deaths(
    mapping: EventSourceMapping,
    executions: list[Execution],
    found: list[Recovery],
    dying: list[str],
) -> None:
    """Invocations were killed at their timeout and crashed; every execution that died
    was in one of them; every run they left behind was recovered (before the deadline,
    since every run ended)."""
    outcomes = mapping.outcomes()
    assert outcomes[KILLED] >= 1 and outcomes[CRASHED] >= 1, outcomes
    dead = {i.pid for i in mapping.invocations if i.died}
    assert {e.pid for e in executions if e.outcome is None} <= dead
    killed = {r.run_id for r in found if r.kind == KILLED_ATTEMPT}
    assert set(dying) <= killed
    assert [r.run_id for r in found if r.next_start is None] == []


def check_forged(mapping: EventSourceMapping, forged: list[str]) -> None:
    """Every forged wakeup was received and handled without being reported (so deleted)
    by each invocation that returned with it; one that only dying invocations held waits
    out the visibility timeout, as any record of theirs."""
    held: dict[str, list[Invocation]] = {message_id: [] for message_id in forged}
    for invocation in mapping.invocations:
        for message_id in set(forged) & set(invocation.message_ids):
            held[message_id].append(invocation)
    assert all(held.values()), "a forged wakeup was never received"
    for message_id, invocations in held.items():
        returned = [i for i in invocations if i.outcome == RETURNED]
        assert returned or all(i.died for i in invocations), invocations
        assert all(message_id in deletable(i.response, i.message_ids) for i in returned)
        assert message_id in mapping.deleted_ids() or not returned


# --- the simulator's own reading of responses (no emulator) -------------------------------


def test_the_mapping_deletes_what_a_response_does_not_report() -> None:
    ids = ["a", "b", "c"]
    assert deletable(None, ids) == ids
    assert deletable({}, ids) == ids
    assert deletable({"batchItemFailures": None}, ids) == ids
    assert deletable({"batchItemFailures": []}, ids) == ids
    assert deletable({"batchItemFailures": [{"itemIdentifier": "b"}]}, ids) == ["a", "c"]


@pytest.mark.parametrize(
    "response",
    [
        "ok",
        [],
        {"batchItemFailures": "b"},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"itemId": "b"}]},
        {"batchItemFailures": [{"itemIdentifier": "not-in-the-batch"}]},
        {"batchItemFailures": ["b"]},
    ],
)
def test_an_invalid_response_fails_the_whole_batch(response: object) -> None:
    assert reported_ids(response, ["a", "b", "c"]) is None
    assert deletable(response, ["a", "b", "c"]) == []


def fifo_message(message_id: str, group: str, number: int) -> dict[str, Any]:
    return {
        "MessageId": message_id,
        "Attributes": {"MessageGroupId": group, "SequenceNumber": str(number)},
    }


def test_the_fifo_check_accepts_a_group_s_messages_in_order() -> None:
    order = FifoOrder()
    a1, a2, b1 = fifo_message("a1", "A", 1), fifo_message("a2", "A", 2), fifo_message("b1", "B", 3)
    order.received([a1, b1])
    order.received([a1])  # made visible again by the invocation itself before it returned
    order.finished([a1, b1])
    order.finished([a1])
    order.deleted(["a1", "b1"])
    order.received([a2])
    assert order.violations == []


def test_the_fifo_check_finds_a_group_delivered_out_of_order() -> None:
    order = FifoOrder()
    a1, a2 = fifo_message("a1", "A", 1), fifo_message("a2", "A", 2)
    order.received([a1])
    order.received([a2])  # while a1 is in flight, and not deleted
    order.finished([a1])
    order.finished([a2])
    order.deleted(["a2"])
    order.received([a1])  # again, after a later one was deleted
    order.received([a2, a1])  # out of order within a batch
    assert order.violations == [
        "group A: a2 received while ['a1'] in flight",
        "group A: a2 received before ['a1']",
        "group A: a1 received after ['a2']",
        "group A out of order in a batch: [2, 1]",
    ]
