"""The backend in process, over the in-memory app: the project's views with Django's test
client, and the Django Tasks backend contract (the django-tasks package ships no reusable
conformance tests: these are its expectations, written out)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import Client

from runlane_sqs import RunStatus
from runlane_sqs.django.backend import InvalidArguments, RunlaneBackend
from runlane_sqs.django.results import RunError
from runlane_sqs.django.worker import worker_app
from tests.django_project.conftest import Memory
from tests.django_project.shop.models import Order
from tests.django_project.shop.tasks import (
    add,
    count_orders,
    introspect,
    pair,
    refuse,
    relay,
    send_receipt,
    shout,
)
from tests.django_project.shop.unlisted import forgotten

try:  # Django 6
    from django.tasks import TaskResultStatus, task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
except ImportError:
    from django_tasks import TaskResultStatus, task
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch


def place_order(client: Client, backend: str, *, rollback: bool = False) -> dict[str, Any]:
    body = {"email": "ana@example.com", "backend": backend, "rollback": rollback}
    response = client.post("/orders/", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    placed: dict[str, Any] = response.json()
    return placed


def drain(memory: Memory) -> int:
    """What ``runlane-sqs worker --drain`` does with the worker's app."""
    return worker_app("default").worker().drain()


def prioritized() -> None:
    """A task function for the priority check (module level, as tasks must be)."""


# the project's views ----------------------------------------------------------------


def test_the_order_view_enqueues_and_the_worker_runs_the_task(
    memory: Memory, client: Client
) -> None:
    placed = place_order(client, "immediate")
    url = f"/results/immediate/{placed['result_id']}/"
    assert client.get(url).json()["status"] == "READY"
    assert client.get(f"/orders/{placed['order']}/").json()["receipt_sent"] is False

    assert drain(memory) == 1

    shown = client.get(url).json()
    assert shown["status"] == "SUCCESSFUL"
    assert shown["return_value"] == {"order": placed["order"], "sent_to": "ana@example.com"}
    assert shown["attempts"] == 1
    assert shown["task"] == "tests.django_project.shop.tasks.send_receipt"
    assert client.get(f"/orders/{placed['order']}/").json()["receipt_sent"] is True


def test_a_rolled_back_order_enqueues_nothing(memory: Memory, client: Client) -> None:
    placed = place_order(client, "default", rollback=True)

    assert client.get(f"/orders/{placed['order']}/").status_code == 404
    assert client.get(f"/results/default/{placed['result_id']}/").status_code == 404
    assert memory.app.store.all_runs() == []
    assert drain(memory) == 0


def test_inside_the_transaction_the_result_id_is_known_and_no_run_exists(
    memory: Memory,
) -> None:
    with transaction.atomic():
        order = Order.objects.create(email="bo@example.com")
        result = send_receipt.enqueue(order.pk)
        assert len(result.id) == 32
        assert (result.status, result.enqueued_at) == (TaskResultStatus.READY, None)
        assert memory.app.store.all_runs() == []
        with pytest.raises(TaskResultDoesNotExist):
            send_receipt.get_result(result.id)
        with pytest.raises(InvalidArguments, match="lone surrogate"):  # checked now
            pair.enqueue("\ud800", 1)
        transaction.set_rollback(True)
    assert memory.app.store.all_runs() == []


def test_without_enqueue_on_commit_a_rolled_back_order_still_has_its_run(
    memory: Memory, client: Client
) -> None:
    """Why ENQUEUE_ON_COMMIT is the default: with it off, the run was written before the
    rollback, and finds no order."""
    placed = place_order(client, "immediate", rollback=True)

    assert drain(memory) == 1
    shown = client.get(f"/results/immediate/{placed['result_id']}/").json()
    assert shown["status"] == "FAILED"
    assert shown["errors"][0]["exception"] == "tests.django_project.shop.models.Order.DoesNotExist"
    [error] = immediate_result(placed["result_id"]).errors
    assert error.exception_class is Order.DoesNotExist  # a nested class's path


def immediate_result(result_id: str) -> Any:
    return send_receipt.using(backend="immediate").get_result(result_id)


@pytest.mark.parametrize(
    ("path", "error", "match"),
    [
        ("tests.django_project.shop.models.Order.Missing", ImportError, "has no 'Order.Missing'"),
        ("tests.django_project.shop.models.Order", ValueError, "not reference a valid exception"),
        ("nowhere.at_all.Error", ImportError, "not a module path"),
        ("Error", ImportError, "not a module path"),
    ],
)
def test_an_error_path_that_names_no_exception_is_refused_by_name(
    path: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match) as raised:
        RunError(exception_class_path=path, traceback="").exception_class  # noqa: B018
    assert path in str(raised.value)


def test_a_module_that_fails_to_import_is_not_taken_for_a_missing_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_errors.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_installed_anywhere"):
        RunError(exception_class_path="broken_errors.Oops", traceback="").exception_class  # noqa: B018


# enqueueing -------------------------------------------------------------------------


def test_enqueue_returns_a_ready_result_whose_id_is_the_run_id(memory: Memory) -> None:
    result = pair.using(backend="immediate").enqueue((1, 2), right=b"x")

    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([[1, 2]], {"right": "x"})
    assert (result.backend, result.attempts, result.errors) == ("immediate", 0, [])
    assert result.enqueued_at is not None and result.started_at is None
    run = memory.app.runs.get(result.id)
    assert (run.task, run.queue) == ("tests.django_project.shop.tasks.pair", "default")
    assert run.payload == {"args": [[1, 2]], "kwargs": {"right": "x"}}
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018


def test_results_are_read_back_and_refreshed(memory: Memory) -> None:
    result = pair.using(backend="immediate").enqueue("a", "b")
    assert drain(memory) == 1

    read = pair.using(backend="immediate").get_result(result.id)
    assert read.status == TaskResultStatus.SUCCESSFUL
    assert read.return_value == ["a", "b"]
    assert read.started_at is not None and read.finished_at is not None
    assert read.enqueued_at == result.enqueued_at
    assert read.worker_ids and read.attempts == 1
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, ["a", "b"])
    with pytest.raises(TaskResultMismatch):
        shout.using(backend="immediate").get_result(result.id)


def test_async_enqueue_and_get_result(memory: Memory) -> None:
    task_ = shout.using(backend="immediate")
    result = asyncio.run(task_.aenqueue("hi", times=2))
    assert drain(memory) == 1

    read = asyncio.run(task_.aget_result(result.id))
    assert read.return_value == "HI HI"
    asyncio.run(result.arefresh())
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_a_task_runs_on_its_queue(memory: Memory) -> None:
    result = shout.using(backend="immediate").enqueue("hi")
    run = memory.app.runs.get(result.id)
    assert (run.task, run.queue) == ("tests.django_project.shop.tasks.shout:emails", "emails")

    moved = shout.using(backend="immediate", queue_name="default").enqueue("hi")
    assert memory.app.runs.get(moved.id).queue == "default"
    assert drain(memory) == 2


def test_arguments_that_are_not_json_are_refused(memory: Memory) -> None:
    task_ = pair.using(backend="immediate")
    for left in (object(), float("nan"), {1, 2}):
        with pytest.raises(InvalidArguments, match="not JSON"):
            task_.enqueue(left, 1)
    with pytest.raises(TypeError):  # what django-tasks' own backends raise
        task_.enqueue(object(), 1)
    with pytest.raises(InvalidArguments, match="lone surrogate"):
        task_.enqueue("\ud800", 1)
    with pytest.raises(InvalidArguments, match="the limit is 65536 bytes"):
        task_.enqueue("x" * 70_000, 1)
    assert memory.app.store.all_runs() == []


def test_an_unknown_queue_is_refused(memory: Memory) -> None:
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        shout.using(backend="immediate", queue_name="nope")


def test_a_queue_runlane_cannot_name_is_refused() -> None:
    any_queue = RunlaneBackend("any", {"QUEUES": []})  # no QUEUES: every queue is valid
    odd = shout.using(backend="immediate")
    object.__setattr__(odd, "queue_name", "bad queue")
    with pytest.raises(InvalidTask, match="queue name"):
        any_queue.validate_task(odd)


def test_priority_is_refused() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        task(priority=5, backend="immediate")(prioritized)
    assert RunlaneBackend.supports_priority is False


def test_run_after_in_the_past_runs_at_once_and_later_waits(memory: Memory) -> None:
    now = memory.clock.now()
    shout.using(backend="immediate", run_after=now - timedelta(hours=1)).enqueue("past")
    assert drain(memory) == 1

    later = shout.using(backend="immediate", run_after=now + timedelta(hours=2)).enqueue("later")
    assert drain(memory) == 0
    assert memory.app.runs.get(later.id).due_at == now + timedelta(hours=2)
    memory.clock.advance(timedelta(hours=2))
    memory.app.maintenance.run_pass()  # due more than 15 minutes ahead: maintenance publishes
    assert drain(memory) == 1
    assert shout.using(backend="immediate").get_result(later.id).return_value == "LATER"


# running ----------------------------------------------------------------------------


def test_a_failure_shows_its_exception_and_traceback(memory: Memory) -> None:
    result = refuse.using(backend="immediate").enqueue("out of stock")
    assert drain(memory) == 1

    read = refuse.using(backend="immediate").get_result(result.id)
    assert read.status == TaskResultStatus.FAILED and read.is_finished
    [error] = read.errors
    assert error.exception_class is ValueError
    assert error.traceback.startswith("Traceback (most recent call last)")
    assert "ValueError: out of stock" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        read.return_value  # noqa: B018


def test_database_connections_are_closed_around_each_attempt(memory: Memory) -> None:
    """What Django's request cycle does (``close_old_connections``, ``CONN_MAX_AGE`` 0 here):
    an attempt does not find the connection the attempt before it left on the thread."""
    immediate = count_orders.using(backend="immediate")
    results = [immediate.enqueue() for _ in range(3)]
    assert drain(memory) == 3
    read = [immediate.get_result(r.id).return_value for r in results]
    assert [r["left_open"] for r in read] == [False, False, False]


def test_a_hook_that_raises_is_logged_and_the_attempt_goes_on(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    app = memory.app  # the worker's (drain)

    @app.hooks.before_attempt
    def broken(ctx: Any) -> None:
        raise RuntimeError("hook bug")

    result = count_orders.using(backend="immediate").enqueue()
    assert drain(memory) == 1
    assert count_orders.using(backend="immediate").get_result(result.id).status == "SUCCESSFUL"
    [logged] = [r for r in caplog.records if "hook" in r.getMessage()]
    assert logged.run_id == result.id and "hook bug" in (logged.exc_text or "")


def test_async_tasks_run(memory: Memory) -> None:
    result = add.using(backend="immediate").enqueue(2, 3)
    assert drain(memory) == 1
    assert add.using(backend="immediate").get_result(result.id).return_value == 5


def test_a_task_that_takes_context_sees_its_attempt_and_result(memory: Memory) -> None:
    result = introspect.using(backend="immediate").enqueue("x")
    assert drain(memory) == 1
    seen = introspect.using(backend="immediate").get_result(result.id).return_value
    assert seen == {"label": "x", "attempt": 1, "result_id": result.id, "status": "RUNNING"}


def test_a_task_enqueues_another_from_the_worker_thread(memory: Memory) -> None:
    result = relay.using(backend="immediate").enqueue("hi")
    assert drain(memory) == 2

    child_id = relay.using(backend="immediate").get_result(result.id).return_value
    assert shout.get_result(child_id).return_value == "HI"


def test_an_unknown_task_at_the_worker_fails_its_result(memory: Memory) -> None:
    """The worker's TASK_MODULES do not hold it: the run is parked (no retry loop), and
    its result says why."""
    result = forgotten.using(backend="immediate").enqueue()
    assert drain(memory) == 0  # received, not executed

    assert memory.app.runs.get(result.id).status is RunStatus.PARKED
    read = forgotten.using(backend="immediate").get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    [error] = read.errors
    assert error.exception_class_path == "runlane_sqs.errors.UnknownTaskError"
    assert "tests.django_project.shop.unlisted.forgotten" in error.traceback
    assert "TASK_MODULES" in error.traceback


def test_a_cancelled_run_fails_its_result(memory: Memory) -> None:
    result = shout.using(backend="immediate").enqueue("hi")
    memory.app.runs.cancel(result.id, reason="not needed")

    read = shout.using(backend="immediate").get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    assert read.errors[0].exception_class_path == "runlane_sqs.django.results.RunCancelled"


def test_unknown_result_ids_do_not_exist(memory: Memory) -> None:
    for result_id in ("0" * 32, "not-a-run-id", ""):
        with pytest.raises(TaskResultDoesNotExist):
            memory.immediate.get_result(result_id)


# configuration ----------------------------------------------------------------------


def test_system_checks_pass_for_the_project(memory: Memory) -> None:
    assert list(memory.default.check()) == []


def test_system_checks_name_bad_options() -> None:
    backend = RunlaneBackend(
        "odd-options",
        {"QUEUES": ["bad queue"], "OPTIONS": {"NOPE": 1, "ENQUEUE_ON_COMMIT": "other"}},
    )
    ids = [message.id for message in backend.check()]
    assert ids == ["runlane_sqs.E001", "runlane_sqs.E003", "runlane_sqs.E002"]


def test_unknown_settings_are_named() -> None:
    backend = RunlaneBackend("odd-settings", {"OPTIONS": {"SETTINGS": {"nope": 1}}})
    [message] = backend.check()
    assert message.id == "runlane_sqs.E002"
    assert "unknown SETTINGS ['nope']" in message.msg


def test_app_and_settings_exclude_each_other() -> None:
    backend = RunlaneBackend(
        "odd-app", {"OPTIONS": {"APP": "tests.apps.tasks:app", "SETTINGS": {"environment": "x"}}}
    )
    with pytest.raises(ImproperlyConfigured, match="not both"):
        backend.app  # noqa: B018
