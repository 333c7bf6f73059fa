"""App versions from the command line (docs/versions.md): two deploys' workers, each
given its version by ``RUNLANE_APP_VERSION``, run the attempts of one run; ``runs get``
and ``runs attempts`` show which version ran what, and ``runs versions`` counts the
unfinished runs per version and task. A bad version stops the worker before it takes
anything."""

from __future__ import annotations

import json

from tests.processes.cli.apps.names import APPROVAL, ECHO, NAP
from tests.processes.cli.conftest import Cli

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
