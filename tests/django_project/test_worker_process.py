"""The project against the emulators (the moto server, or DynamoDB Local + LocalStack with
``RUNLANE_TEST_BACKEND=aws-local``) with a real ``runlane-sqs worker`` process that loads
the project: ``--app runlane_sqs.django.worker:app``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.django.backend import backend_named
from tests.django_project.shop.unlisted import forgotten
from tests.emulators import WorkerProcess

pytestmark = pytest.mark.integration

WORKER_APP = "runlane_sqs.django.worker:app"
WORKER_TIMEOUT_SECONDS = 60


@pytest.fixture
def app(backend_env: dict[str, str], fresh_backends: None) -> Runlane:
    """The default backend's app on the emulators, its table and queues provisioned."""
    backend = backend_named("default")
    backend.load_task_modules()
    backend.app.provision()
    return backend.app


def drain_in_a_worker_process(start_worker: Callable[..., WorkerProcess]) -> str:
    """``runlane-sqs worker --drain`` in a child process; returns its output."""
    worker = start_worker("--app", WORKER_APP, "--drain")
    code = worker.wait(timeout=WORKER_TIMEOUT_SECONDS)
    assert code == 0, f"worker exited {code}:\n{worker.log()}"
    return worker.output()


def test_an_order_committed_in_the_view_is_receipted_by_the_worker(
    app: Runlane, client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    body = {"email": "ana@example.com", "backend": "default"}
    response = client.post("/orders/", json.dumps(body), content_type="application/json")
    placed: dict[str, Any] = response.json()
    url = f"/results/default/{placed['result_id']}/"
    assert client.get(url).json()["status"] == "READY"

    assert "executed 1 run" in drain_in_a_worker_process(start_worker)

    shown = client.get(url).json()
    assert shown["status"] == "SUCCESSFUL", shown
    assert shown["return_value"] == {"order": placed["order"], "sent_to": "ana@example.com"}
    assert client.get(f"/orders/{placed['order']}/").json()["receipt_sent"] is True


def test_a_rolled_back_order_leaves_no_run(app: Runlane, client: Client) -> None:
    body = {"email": "bo@example.com", "backend": "default", "rollback": True}
    response = client.post("/orders/", json.dumps(body), content_type="application/json")
    placed: dict[str, Any] = response.json()

    assert client.get(f"/results/default/{placed['result_id']}/").status_code == 404
    assert app.runs.list().runs == []


def test_a_task_the_worker_does_not_register_fails_its_result(
    app: Runlane, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = forgotten.enqueue()

    drain_in_a_worker_process(start_worker)

    assert app.runs.get(result.id).status is RunStatus.PARKED
    read = forgotten.get_result(result.id)
    assert read.status == "FAILED"
    assert read.errors[0].exception_class_path == "runlane_sqs.errors.UnknownTaskError"
