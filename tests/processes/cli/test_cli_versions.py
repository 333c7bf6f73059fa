"""App versions from the command line (docs/versions.md): two deploys' workers, each
given its version by ``RUNLANE_APP_VERSION``, run the attempts of one run; ``runs get``
and ``runs attempts`` show which version ran what, and ``runs versions`` counts the
unfinished runs per version and task. A bad version stops the worker before it takes
anything."""

from __future__ import annotations

import json
from collections.abc import Iterable

from runlane_sqs import Runlane
from tests.processes.cli.apps.names import APPROVAL, ECHO, NAP, PINNED
from tests.processes.cli.conftest import Cli, wait_until

OLD, NEW = "2026.11.3", "2026.12.1"
EXIT_APP_NOT_IMPORTABLE = 3
"""The shop app builds itself from the variables when imported (``Runlane.from_env``)."""


def test_two_deploys_versions_are_shown_per_attempt_and_counted_per_task(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    token = cli.ok("tokens", "create").stdout.strip()
    approval, nap = cli.many(
        [
            ("trigger", APPROVAL, "--payload", json.dumps({"token": token}), "--json"),
            ("trigger", NAP, "--json"),
        ]
    )
    approval_id, nap_id = approval.json()["id"], nap.json()["id"]
    assert cli.ok("worker", "--drain", env={"RUNLANE_APP_VERSION": OLD}).stdout.strip() == (
        "executed 2 run(s)"
    )
    cli.ok("tokens", "complete", token, "--value", '"approved"')
    cli.ok("worker", "--drain", env={"RUNLANE_APP_VERSION": NEW})
    echo_id = cli.ok("trigger", ECHO, "--json").json()["id"]

    shown, attempts, counted, table = cli.many(
        [
            ("runs", "get", approval_id, "--json"),
            ("runs", "attempts", approval_id, "--json"),
            ("runs", "versions", "--json"),
            ("runs", "versions"),
        ]
    )
    assert (shown.json()["status"], shown.json()["app_version"]) == ("succeeded", OLD)
    assert [(a["number"], a["app_version"]) for a in attempts.json()["attempts"]] == [
        (1, OLD),
        (2, NEW),
    ]
    assert counted.json() == {
        "versions": [OLD],
        "counts": [{"app_version": OLD, "task": NAP, "runs": 1, "statuses": {"released": 1}}],
        "not_started": {ECHO: 1},
    }
    assert table.code == 0, table.stderr
    assert OLD in table.stdout and NAP in table.stdout and "(not started)" in table.stdout
    assert NEW not in table.stdout  # its one run finished

    refused = cli("worker", "--drain", env={"RUNLANE_APP_VERSION": "<b>v3</b>"})
    assert refused.code == EXIT_APP_NOT_IMPORTABLE, refused.stderr
    assert "RUNLANE_APP_VERSION=<b>v3</b>" in refused.stderr
    assert cli.ok("runs", "get", echo_id, "--json").json()["status"] == "queued"
    assert cli.ok("runs", "get", nap_id, "--json").json()["app_version"] == OLD


def test_pinned_runs_finish_on_their_version_whichever_worker_receives_them(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    """Runs started on v1 and on v2, every token then decided: a v2 worker finishes the
    v2 runs and sends the v1 runs' wakeups back, neither claiming nor dead-lettering them;
    a v1 worker then finishes those. (The v1 worker starts after the v2 one has drained:
    moto's long polls look again once a second, so the worker that sent a wakeup back is
    nearly always the first to see it again; SQS hands it to any waiting poller.)"""
    reader = Runlane.from_env()  # the test's backend (the fixtures set its variables)

    def started_on(version: str, runs: int) -> dict[str, str]:
        tokens = [cli.ok("tokens", "create").stdout.strip() for _ in range(runs)]
        made = cli.many(
            [("trigger", PINNED, "--payload", json.dumps({"token": t}), "--json") for t in tokens]
        )
        cli.ok("worker", "--drain", env={"RUNLANE_APP_VERSION": version})
        ids = {done.json()["id"]: token for done, token in zip(made, tokens, strict=True)}
        assert _all(reader, ids, "released")
        return ids

    on_old, on_new = started_on(OLD, 3), started_on(NEW, 3)
    cli.many(
        [("tokens", "complete", t, "--value", '"ok"') for t in [*on_old.values(), *on_new.values()]]
    )
    drained = cli.ok("--log-format", "json", "worker", "--drain", env={"RUNLANE_APP_VERSION": NEW})
    assert _all(reader, on_new, "succeeded")
    for run_id in on_old:
        assert reader.runs.get(run_id).attempt == 1, run_id  # left to a worker of v1
        assert f"leaving run {run_id}" in drained.stderr

    old_worker = cli.start("worker", env={"RUNLANE_APP_VERSION": OLD})
    wait_until(lambda: _all(reader, on_old, "succeeded"), 60, "the v1 runs to succeed")
    for runs, version in ((on_old, OLD), (on_new, NEW)):
        for run_id in runs:
            attempts = cli.ok("runs", "attempts", run_id, "--json").json()["attempts"]
            assert [a["app_version"] for a in attempts] == [version, version], run_id
    assert old_worker.alive(), old_worker.stderr()
    assert cli.ok("runs", "versions", "--json").json()["counts"] == []


def _all(app: Runlane, run_ids: Iterable[str], status: str) -> bool:
    return all(app.runs.get(run_id).status.value == status for run_id in run_ids)
