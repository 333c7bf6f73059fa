"""Debounce with time moved by hand (docs/debounce.md): triggers of a key within the
quiet period collapse into one run, which starts after the quiet period with the last
payload (or the merged payloads), no later than the maximum wait; a run that started
takes no more triggers; bad input is refused before anything is written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    ConfigurationError,
    ConflictError,
    Debounce,
    EventType,
    InvalidKeyError,
    PayloadTooLarge,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.core import machine
from runlane_sqs.core.debounce import TASK_WIDE_KEY, collapse
from runlane_sqs.core.model import KeyKind
from runlane_sqs.core.values import encode_json
from tests.backends import ONLY_AWS, ONLY_MEMORY, Backend
from tests.emulators import count_requests
from tests.workers import WorkerKind

NOTIFY = "digest.notify"
"""Debounced per user: 2 s of quiet, at most 6 s."""
REINDEX = "search.reindex"
"""Debounced task-wide, its payloads merged into one list of ids."""
PLAIN = "digest.plain"
BUCKET = "runlane-debounce-values"


def register(app: Runlane) -> None:
    @app.task(name=NOTIFY, debounce=Debounce(quiet=2, max_wait=6, key=lambda p: p["user"]))
    def notify(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(
        name=REINDEX,
        debounce=Debounce(quiet=1, merge=lambda old, new: sorted(set(old) | set(new))),
    )
    def reindex(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=PLAIN)
    def plain(ctx: TaskContext, payload: Any) -> Any:
        return payload


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def test_triggers_within_the_quiet_period_collapse_into_one_run(
    backend: Backend, app: Runlane
) -> None:
    t0 = backend.clock.now()
    first = app.trigger(NOTIFY, {"user": "ann", "n": 1})
    backend.clock.advance(1.5)
    second = app.trigger(NOTIFY, {"user": "ann", "n": 2})
    backend.clock.advance(1.5)
    third = app.trigger(NOTIFY, {"user": "ann", "n": 3})
    other = app.trigger(NOTIFY, {"user": "bob", "n": 1})

    assert first.created and not second.created and not third.created and other.created
    assert second.id == third.id == first.id != other.id
    run = app.runs.get(first.id)
    assert run.payload == {"user": "ann", "n": 3}
    assert run.collapsed == 2 and run.debounce_key == "ann"
    assert run.due_at == t0 + timedelta(seconds=5)  # 2 s after the last trigger
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 0)
    events = app.runs.events(first.id)
    assert [e.type for e in events] == [EventType.TRIGGERED]  # a collapse appends no event
    assert events[0].data["debounce_key"] == "ann"


def test_the_maximum_wait_caps_the_due_time_and_then_frees_the_key(
    backend: Backend, app: Runlane
) -> None:
    """A trigger every second never leaves 2 s of quiet: the run is due 6 s after its
    first trigger, and a trigger after that starts the key's next run."""
    t0 = backend.clock.now().replace(microsecond=0)
    backend.clock.set(t0)
    runs = []
    for n in range(8):
        runs.append(app.trigger(NOTIFY, {"user": "ann", "n": n}))
        backend.clock.advance(1)
    first, later = runs[0], runs[7]
    assert {r.id for r in runs[:7]} == {first.id} and later.created
    held = app.runs.get(first.id)
    assert held.due_at == t0 + timedelta(seconds=6) and held.payload["n"] == 6
    assert app.runs.get(later.id).due_at == t0 + timedelta(seconds=9)


def test_a_merge_makes_the_payload_from_every_trigger(backend: Backend, app: Runlane) -> None:
    runs = [app.trigger(REINDEX, ids) for ids in ([3, 1], [2], [1, 4])]

    assert len({r.id for r in runs}) == 1
    run = app.runs.get(runs[0].id)
    assert run.payload == [1, 2, 3, 4] and run.debounce_key == TASK_WIDE_KEY
    assert run.collapsed == 2


def test_a_trigger_key_overrides_the_key_function(backend: Backend, app: Runlane) -> None:
    a = app.trigger(NOTIFY, {"user": "ann"}, debounce_key="team-1")
    b = app.trigger(NOTIFY, {"user": "bob"}, debounce_key="team-1")
    c = app.trigger(NOTIFY, {"user": "bob"})
    assert a.id == b.id != c.id
    assert app.runs.get(a.id).payload == {"user": "bob"}


@ONLY_MEMORY
def test_the_run_starts_after_the_quiet_period_with_the_last_payload(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    """In memory, where SQS's delays follow the test's clock: the first trigger's wakeup
    comes 2 s after it and finds the run due 1.5 s later (the key was triggered again);
    the worker keeps the message until then, and the run starts once, at that time, with
    the last payload."""
    first = app.trigger(NOTIFY, {"user": "ann", "n": 1})
    backend.clock.advance(1.5)
    app.trigger(NOTIFY, {"user": "ann", "n": 2})
    due = backend.clock.now() + timedelta(seconds=2)
    backend.clock.advance(0.6)  # the first wakeup is visible, the run is not due

    assert worker_kind.drain(app) == 1

    run = app.runs.get(first.id)
    assert (run.status, run.result, run.attempt) == (
        RunStatus.SUCCEEDED,
        {"user": "ann", "n": 2},
        1,
    )
    started = next(e.at for e in app.runs.events(first.id) if e.type is EventType.STARTED)
    assert started == due
    assert worker_kind.drain(app) == 0  # no other wakeup runs it again


@ONLY_MEMORY
def test_a_due_time_beyond_the_hold_has_its_wakeup_sent_again(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """Quiet periods of a minute: the first wakeup finds the run due 40 s later (past
    what a worker holds a message for), so its wakeup is sent again, a moment early,
    and the worker that receives it holds it until the due time."""

    def slow(app: Runlane) -> None:
        @app.task(name="digest.slow", debounce=Debounce(quiet=60, max_wait=600))
        def digest(ctx: TaskContext, payload: Any) -> Any:
            return payload

    app = backend.app(register=slow)
    first = app.trigger("digest.slow", 1)
    backend.clock.advance(40)
    app.trigger("digest.slow", 2)
    due = backend.clock.now() + timedelta(seconds=60)
    backend.clock.advance(20)

    assert worker_kind.drain(app) == 0  # sent again for 40 s later
    assert app.runs.get(first.id).status is RunStatus.QUEUED
    backend.clock.advance(40)
    assert worker_kind.drain(app) == 1
    started = next(e.at for e in app.runs.events(first.id) if e.type is EventType.STARTED)
    assert started == due and app.runs.get(first.id).result == 2


@ONLY_MEMORY
def test_a_run_that_started_takes_no_more_triggers(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    first = app.trigger(NOTIFY, {"user": "ann", "n": 1})
    backend.clock.advance(2)
    assert worker_kind.drain(app) == 1

    second = app.trigger(NOTIFY, {"user": "ann", "n": 2})
    assert second.created and second.id != first.id
    backend.clock.advance(2)
    assert worker_kind.drain(app) == 1
    assert app.runs.get(second.id).result == {"user": "ann", "n": 2}
    assert app.runs.get(first.id).result == {"user": "ann", "n": 1}


def test_a_cancelled_run_hands_its_key_to_a_new_run(backend: Backend, app: Runlane) -> None:
    first = app.trigger(NOTIFY, {"user": "ann", "n": 1})
    app.runs.cancel(first.id)
    second = app.trigger(NOTIFY, {"user": "ann", "n": 2})
    assert second.created and second.id != first.id
    assert app.runs.get(first.id).payload == {"user": "ann", "n": 1}


def test_a_claim_decided_on_a_read_is_refused_after_a_collapse(
    backend: Backend, app: Runlane
) -> None:
    """A worker read the run, then a trigger collapsed into it: the claim the worker
    decided on its read must not start the attempt on the payload it read."""
    run = app.trigger(NOTIFY, {"user": "ann", "n": 1})
    backend.clock.advance(2)
    store = app.engine.store
    read = store.get_run(run.id)
    assert read is not None
    holder = store.keys.get_key_holder(KeyKind.DEBOUNCE, NOTIFY, "ann", backend.clock.now())
    assert holder is not None and holder.expires_at is not None
    rule = app.engine.tasks.resolve(NOTIFY).debounce
    assert rule is not None
    text = encode_json({"user": "ann", "n": 2}, what="payload", limit_bytes=1024)
    store.collapse(
        collapse(
            run.id,
            "ann",
            text,
            now=backend.clock.now(),
            cap=holder.expires_at,
            rule=rule,
            republish=app.engine.config.republish,
        )
    )
    claim = machine.claim_lease(
        read, now=backend.clock.now(), owner="w", token="t", duration=timedelta(minutes=1)
    )
    assert isinstance(claim, machine.Transition)
    with pytest.raises(ConflictError):
        store.apply(claim)
    assert app.runs.get(run.id).payload == {"user": "ann", "n": 2}


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (lambda app: app.trigger(PLAIN, {}, debounce_key="k"), "has no debounce"),
        (lambda app: app.trigger(NOTIFY, {"user": "a"}, delay=5), "cannot also have delay"),
        (
            lambda app: app.trigger(NOTIFY, {"user": "a"}, idempotency_key="i"),
            "cannot also have idempotency_key",
        ),
        (
            lambda app: app.trigger(NOTIFY, {"user": "a"}, ordering_key="o"),
            "cannot also have ordering_key",
        ),
        (lambda app: app.trigger(NOTIFY, {"no_user": 1}), "raised KeyError"),
        (lambda app: app.trigger(NOTIFY, {"user": 7}), "returned int, not a string"),
        (lambda app: app.trigger(NOTIFY, {"user": "a\x00<b>"}), "U\\+0000"),
        (lambda app: app.trigger(NOTIFY, {"user": "a"}, debounce_key=" "), "must not be empty"),
        (lambda app: app.trigger(NOTIFY, {"user": "a"}, debounce_key="\ud800"), "U\\+D800"),
    ],
)
def test_bad_triggers_are_refused_before_anything_is_written(
    backend: Backend, app: Runlane, trigger: Any, message: str
) -> None:
    with pytest.raises(InvalidKeyError, match=message):
        trigger(app)
    assert app.runs.list().runs == []


def test_a_transaction_refuses_a_debounced_trigger(backend: Backend, app: Runlane) -> None:
    tx = app.transaction()
    with pytest.raises(InvalidKeyError, match="not a transaction"):
        tx.trigger(NOTIFY, {"user": "ann"})


def test_a_payload_for_the_bucket_is_refused(backend: Backend) -> None:
    """A debounced run's payload is replaced by one write: it stays in the run's item."""
    app = backend.app(register=register, payload_bucket=BUCKET, inline_limit=1024)
    big = {"user": "ann", "text": "x" * 2000}
    with pytest.raises(PayloadTooLarge, match="stays in the run's item"):
        app.trigger(NOTIFY, big)
    first = app.trigger(NOTIFY, {"user": "ann"})
    with pytest.raises(PayloadTooLarge, match="the limit is 1024 bytes"):
        app.trigger(NOTIFY, big)
    assert app.runs.get(first.id).payload == {"user": "ann"}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (Debounce(quiet=0.5), "at least 1 second"),
        (Debounce(quiet=5, max_wait=2), "max_wait is from its quiet period"),
        (Debounce(quiet=5, max_wait=8 * 86400), "max_wait is from its quiet period"),
        (Debounce(quiet="soon"), "debounce quiet"),
        (Debounce(quiet=1, key="user"), "debounce key is not callable"),  # type: ignore[arg-type]
        ("1s", "is a Debounce"),
    ],
)
def test_bad_debounce_settings_are_refused_at_registration(
    backend: Backend, rule: Any, message: str
) -> None:
    app = backend.app()
    with pytest.raises(ConfigurationError, match=message):
        app.task(name="bad.debounce", debounce=rule)(lambda ctx, p: p)


@ONLY_AWS
def test_a_collapse_costs_a_read_of_the_key_and_one_write(backend: Backend, app: Runlane) -> None:
    """What docs/debounce.md says a trigger costs, counted on the emulators."""
    app.trigger(NOTIFY, {"user": "warm-up"})  # the queue's URL, looked up once
    dynamodb, sqs = count_requests(app.client("dynamodb")), count_requests(app.client("sqs"))
    app.trigger(NOTIFY, {"user": "ann", "n": 1})
    assert (dict(dynamodb), dict(sqs)) == (
        {"GetItem": 1, "TransactWriteItems": 1},
        {"SendMessage": 1},
    )
    dynamodb.clear()
    sqs.clear()
    app.trigger(NOTIFY, {"user": "ann", "n": 2})
    assert (dict(dynamodb), dict(sqs)) == ({"GetItem": 1, "UpdateItem": 1}, {})
    dynamodb.clear()
    app.trigger(REINDEX, [1])
    dynamodb.clear()
    app.trigger(REINDEX, [2])  # with a merge: the run is read too
    assert dict(dynamodb) == {"GetItem": 2, "UpdateItem": 1}
