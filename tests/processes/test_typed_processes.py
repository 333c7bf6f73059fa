"""Typed tasks with real worker processes (docs/typed-tasks.md), on the moto server and on
DynamoDB Local + LocalStack: a run triggered with a pydantic model comes back, from a
worker process, as the dataclass its handler returned; ten runs waiting while a deploy
adds a required field are parked ``payload_mismatch`` by that deploy's worker, and a
compatible deploy's worker finishes them once they are unparked."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.core.parking import PAYLOAD_MISMATCH
from tests.apps.typed_worker import ORDER_ENV, SHIP, Order, Receipt, register
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration
WORKER_APP = "tests.apps.typed_worker:app"
PLACED = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_a_model_sent_to_a_worker_process_comes_back_as_its_type(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    ship = app.tasks.resolve(SHIP)
    run = app.trigger(ship, Order(id=7, customer="acme", placed_at=PLACED))
    start_worker("--app", WORKER_APP, "--concurrency", "2")

    done = app.runs.wait(run.id, timeout=60)

    assert done.status is RunStatus.SUCCEEDED
    assert ship.result_of(done) == Receipt(order_id=7, customer="acme", handled_as="Order")


def test_runs_a_new_type_refuses_are_parked_until_a_compatible_deploy(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    runs = [app.trigger(SHIP, Order(id=n, customer="acme", placed_at=PLACED)) for n in range(10)]
    strict = start_worker(
        "--app", WORKER_APP, "--concurrency", "2", extra_env={ORDER_ENV: "coupon"}
    )

    def all_parked() -> bool:
        return all(app.runs.get_stored(r.id).status is RunStatus.PARKED for r in runs)

    wait_until(all_parked, 60, "the new deploy's worker to park the ten runs")
    os.kill(strict.pid, signal.SIGTERM)
    assert strict.wait(30) == 0
    for run in runs:
        parked = app.runs.get_stored(run.id)
        assert parked.parked_reason == PAYLOAD_MISMATCH and parked.attempt == 1
        assert app.runs.events(run.id)[-1].data["errors"] == [
            {"path": "coupon", "message": "Field required", "kind": "missing"}
        ]

    start_worker("--app", WORKER_APP, "--concurrency", "2", extra_env={ORDER_ENV: "optional"})
    for run in runs:
        app.runs.unpark(run.id)

    ship = app.tasks.resolve(SHIP)
    done = [app.runs.wait(r.id, timeout=60) for r in runs]
    assert [ship.result_of(d) for d in done] == [
        Receipt(order_id=n, customer="acme", handled_as="OrderWithOptionalCoupon")
        for n in range(10)
    ]
