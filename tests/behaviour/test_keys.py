"""Idempotency and singleton keys.

An idempotency key, scoped by task, makes a duplicate trigger return the run that holds
it (with its first payload, publishing nothing), even after that run succeeded; a failed
owner releases the key, so the next trigger creates a new run. A singleton key allows
one unfinished run per key; once it finishes (even if its worker died before releasing
the key) the next trigger creates a new run. Empty or malformed keys are refused before
anything is written. Keys (signal keys too) are compared as Unicode NFC: two spellings of
the same text are one key.
"""

from __future__ import annotations

from typing import Any

import pytest

from runlane_sqs import InvalidKeyError, Runlane, RunStatus, TaskContext
from runlane_sqs.core.model import KeyKind
from tests.backends import Backend
from tests.behaviour.worker_support import SYNC_WORKER

CHARGE = "keys.charge"
REFUND = "keys.refund"
AWAIT = "keys.await-signal"
NFC_CAFE = "caf\u00e9"
NFD_CAFE = "cafe\u0301"


class Tasks:
    """Two tasks that record each payload they get, and fail when it asks them to."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def register(self, app: Runlane) -> None:
        app.task(self.handle, name=CHARGE)
        app.task(self.handle, name=REFUND)
        app.task(self.await_signal, name=AWAIT)

    def handle(self, ctx: TaskContext, payload: Any) -> Any:
        self.calls.append((ctx.task, payload))
        if isinstance(payload, dict) and payload.get("fail"):
            raise RuntimeError("card declined")
        return payload

    def await_signal(self, ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal(payload["key"]).payload


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    return backend.app(register=tasks.register)


def run_count(app: Runlane) -> int:
    return len(app.runs.list(limit=100).runs)


def key_owner(app: Runlane, kind: KeyKind, key: str, task: str = CHARGE) -> str | None:
    """The run id the stored key item names (None once the key is released)."""
    return app.store.keys.get_key_owner(kind, task, key, app.clock.now())


BAD_KEYS = [
    "",
    "   ",
    " key",
    "key ",
    "k\x00ey",
    "k\ney",
    "k" * 257,
    42,
    "k\u202eey",
    "k\u00adey",
    "k\u200bey",
    "k\ud800ey",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_a_bad_key_is_refused_and_nothing_is_written(
    backend: Backend, app: Runlane, key: Any
) -> None:
    for option in ("idempotency_key", "singleton_key"):
        with pytest.raises(InvalidKeyError):
            app.trigger(CHARGE, {}, **{option: key})
    assert run_count(app) == 0
    assert backend.depth(app) == 0


def test_a_duplicate_trigger_returns_the_existing_run(
    backend: Backend, app: Runlane, tasks: Tasks
) -> None:
    first = app.trigger(CHARGE, {"order": 1}, idempotency_key="order-1")
    again = app.trigger(CHARGE, {"order": 1, "retry": True}, idempotency_key="order-1")
    other_task = app.trigger(REFUND, {"order": 1}, idempotency_key="order-1")

    assert (first.created, again.created, other_task.created) == (True, False, True)
    assert again.id == first.id
    assert again.payload == {"order": 1}
    assert other_task.id != first.id
    assert run_count(app) == 2
    assert backend.depth(app) == 2  # the duplicate published nothing

    assert SYNC_WORKER.drain(app) == 2
    after_success = app.trigger(CHARGE, {"order": 1}, idempotency_key="order-1")
    assert (after_success.id, after_success.created) == (first.id, False)
    assert after_success.status is RunStatus.SUCCEEDED
    assert SYNC_WORKER.drain(app) == 0
    assert sorted(tasks.calls) == [(CHARGE, {"order": 1}), (REFUND, {"order": 1})]
    assert run_count(app) == 2


def test_a_failed_run_releases_its_idempotency_key(app: Runlane) -> None:
    failed = app.trigger(CHARGE, {"fail": True}, idempotency_key="order-2")
    assert key_owner(app, KeyKind.IDEMPOTENCY, "order-2") == failed.id

    assert SYNC_WORKER.drain(app) == 1
    assert app.runs.get(failed.id).status is RunStatus.FAILED
    assert key_owner(app, KeyKind.IDEMPOTENCY, "order-2") is None

    retried = app.trigger(CHARGE, {"fail": False}, idempotency_key="order-2")
    assert retried.created and retried.id != failed.id
    assert key_owner(app, KeyKind.IDEMPOTENCY, "order-2") == retried.id
    assert SYNC_WORKER.drain(app) == 1
    assert app.runs.get(retried.id).status is RunStatus.SUCCEEDED
    assert app.trigger(CHARGE, None, idempotency_key="order-2").id == retried.id


def test_a_singleton_key_allows_one_active_run(app: Runlane, tasks: Tasks) -> None:
    active = app.trigger(CHARGE, {"n": 1}, singleton_key="user-7")
    duplicate = app.trigger(CHARGE, {"n": 2}, singleton_key="user-7")
    assert (duplicate.id, duplicate.created, duplicate.status) == (
        active.id,
        False,
        RunStatus.QUEUED,
    )
    other_key = app.trigger(CHARGE, {"n": 3}, singleton_key="user-8")
    assert other_key.created is True

    assert SYNC_WORKER.drain(app) == 2
    assert app.runs.get(active.id).status is RunStatus.SUCCEEDED

    next_one = app.trigger(CHARGE, {"n": 4}, singleton_key="user-7")
    assert next_one.created and next_one.id != active.id
    assert key_owner(app, KeyKind.SINGLETON, "user-7") == next_one.id
    assert SYNC_WORKER.drain(app) == 1
    assert sorted(payload["n"] for _, payload in tasks.calls) == [1, 3, 4]
    assert run_count(app) == 3


def test_a_singleton_held_by_a_finished_run_whose_key_was_not_released_is_taken_over(
    app: Runlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker can die between writing the outcome and releasing the key; the next
    trigger sees the owner finished and takes the key over."""
    first = app.trigger(CHARGE, {"n": 1}, singleton_key="report")
    monkeypatch.setattr(app.engine.finisher, "release_keys", lambda run: None)  # worker "dies"
    assert SYNC_WORKER.drain(app) == 1
    assert key_owner(app, KeyKind.SINGLETON, "report") == first.id

    second = app.trigger(CHARGE, {"n": 2}, singleton_key="report")

    assert second.created and second.id != first.id
    assert key_owner(app, KeyKind.SINGLETON, "report") == second.id


def test_nfc_and_nfd_spellings_of_an_idempotency_key_are_one_key(
    backend: Backend, app: Runlane
) -> None:
    assert NFC_CAFE != NFD_CAFE
    first = app.trigger(CHARGE, {"n": 1}, idempotency_key=NFC_CAFE)
    again = app.trigger(CHARGE, {"n": 2}, idempotency_key=NFD_CAFE)

    assert (first.created, again.created, again.id) == (True, False, first.id)
    assert run_count(app) == 1
    assert backend.depth(app) == 1
    assert first.idempotency_key == NFC_CAFE
    found = app.runs.find_current(CHARGE, NFD_CAFE)
    assert found is not None and found.id == first.id

    app.idempotency.reset(CHARGE, NFD_CAFE)
    assert app.runs.find_current(CHARGE, NFC_CAFE) is None
    assert app.trigger(CHARGE, {"n": 3}, idempotency_key=NFC_CAFE).created


def test_nfc_and_nfd_spellings_of_a_singleton_key_are_one_key(app: Runlane) -> None:
    active = app.trigger(CHARGE, {"n": 1}, singleton_key=NFD_CAFE)
    duplicate = app.trigger(CHARGE, {"n": 2}, singleton_key=NFC_CAFE)

    assert (duplicate.id, duplicate.created) == (active.id, False)
    found = app.runs.find_active(CHARGE, NFC_CAFE)
    assert found is not None and found.id == active.id


def test_a_signal_sent_to_the_nfd_spelling_wakes_a_run_waiting_on_the_nfc_spelling(
    app: Runlane,
) -> None:
    run = app.trigger(AWAIT, {"key": NFC_CAFE})
    assert SYNC_WORKER.drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.RELEASED

    assert app.signals.send(NFD_CAFE, "paid") == 1
    assert SYNC_WORKER.drain(app) == 1
    done = app.runs.get(run.id)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, "paid")
