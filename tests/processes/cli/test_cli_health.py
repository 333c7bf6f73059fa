"""``runlane-sqs health`` in a real process: before any maintenance pass it says none
has finished and exits 9 (a script can alert on it); after a pass it names the pass and
what it did, the runs of the last hour by status and each queue's messages, exits 0, and
``--json`` prints the same as one document."""

from __future__ import annotations

import pytest

from runlane_sqs import Runlane
from tests.processes.cli.apps.queues_app import APP_SPEC, BILLING, INVOICES, TASK, build
from tests.processes.cli.conftest import Cli, unreachable_backend

EXIT_BACKEND = 4
EXIT_UNHEALTHY = 9


@pytest.fixture
def app(provisioned: dict[str, str]) -> Runlane:
    built = build()
    built.provision()
    return built


@pytest.fixture
def app_cli(cli: Cli, app: Runlane) -> Cli:
    runner = Cli({**cli.env, "RUNLANE_APP": APP_SPEC}, cli.log_dir)
    runner.started = cli.started
    return runner


def test_health_before_and_after_a_maintenance_pass(app: Runlane, app_cli: Cli) -> None:
    app.trigger(TASK, 1)
    before = app_cli("health")
    assert before.code == EXIT_UNHEALTHY, before.stderr
    assert "last pass: none has finished" in before.stdout

    app_cli.ok("worker", "--drain", "--queue", BILLING)
    report = app.maintenance.run_pass()
    text, as_json = app_cli.many([("health",), ("health", "--json")])

    assert text.code == 0, text.stderr
    assert f"last pass {report.pass_id} finished" in text.stdout
    assert "published 0, recovered 0" in text.stdout
    assert "succeeded 1" in text.stdout and "overdue runs: 0" in text.stdout
    document = as_json.json()
    assert document["last_pass"]["pass_id"] == report.pass_id
    assert document["stale"] is False
    assert document["overdue"] == {"value": 0, "more": False}
    assert document["activity"]["counts"]["succeeded"] == 1
    assert [q["name"] for q in document["queues"]] == [BILLING, INVOICES]
    assert all(q["dead_letters"] == 0 and q["problem"] is None for q in document["queues"])


def test_health_with_the_backend_unreachable_is_a_backend_error(cli: Cli) -> None:
    reason, env = unreachable_backend()
    done = cli("health", env=env)
    assert done.code == EXIT_BACKEND, (reason, done.stderr)
    assert done.stderr.startswith("error: ")
