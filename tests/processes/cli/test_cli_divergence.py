"""Two deploys of the shop app in worker processes on the moto server (docs/versions.md):
a run started on v1 and waiting on a token is resumed on v2, whose handler inserted a
step before the wait, and is parked ``history_diverged`` without that step running; the
CLI and the console show the recorded calls next to the new ones. With the same change
behind ``ctx.patched``, the unparked run completes on v2 down the old branch, and a new
run takes the new one."""

from __future__ import annotations

import json
from pathlib import Path

from runlane_sqs import Runlane
from tests.behaviour.console_support import client_for
from tests.processes.cli.apps.names import CODE_ENV, ORDER
from tests.processes.cli.conftest import Cli


def deploy(version: str, code: str) -> dict[str, str]:
    return {"RUNLANE_APP_VERSION": version, CODE_ENV: code}


def executions(markers: Path, run_id: str, step: str) -> list[str]:
    """The deploys' codes that executed ``step`` of the run, in order."""
    done = markers / f"{run_id}.{step}"
    return done.read_text().split() if done.exists() else []


def test_an_inserted_step_parks_the_run_and_a_patch_lets_it_finish_on_the_new_deploy(
    cli: Cli, provisioned: dict[str, str], markers: Path
) -> None:
    token = cli.ok("tokens", "create").stdout.strip()
    run_id = cli.ok("trigger", ORDER, "--payload", json.dumps({"token": token}), "--json").json()[
        "id"
    ]
    cli.ok("worker", "--drain", env=deploy("v1", "v1"))
    cli.ok("tokens", "complete", token, "--value", '"approved"')
    cli.ok("worker", "--drain", env=deploy("v2", "inserted"))

    shown = cli.ok("runs", "get", run_id, "--json").json()
    assert (shown["status"], shown["parked_reason"]) == ("parked", "history_diverged")
    assert shown["divergence"] == {
        "recorded": ["step charge", f"wait token:{token}#1"],
        "reached": ["step charge"],
        "asked": "step audit",
        "unreached": [f"wait token:{token}#1"],
    }
    assert executions(markers, run_id, "charge") == ["v1"]
    assert executions(markers, run_id, "audit") == []  # stopped before it ran
    table = cli.ok("runs", "get", run_id).stdout
    assert "history diverged: stopped before step audit" in table
    page = client_for(Runlane.from_env()).get(f"/runs/{run_id}").text
    assert "History diverged" in page and "<code>step audit</code>" in page
    assert 'action="/runs/' + run_id + '/unpark"' in page

    cli.ok("runs", "unpark", run_id, "--actor", "ops", "--reason", "v2 patched")
    cli.ok("worker", "--drain", env=deploy("v2.1", "patched"))
    finished = cli.ok("runs", "get", run_id, "--json").json()
    assert (finished["status"], finished["app_version"]) == ("succeeded", "v1")
    assert executions(markers, run_id, "charge") == ["v1"]
    assert executions(markers, run_id, "audit") == []  # the old branch

    fresh = cli.ok("trigger", ORDER, "--payload", json.dumps({"token": token}), "--json").json()
    cli.ok("worker", "--drain", env=deploy("v2.1", "patched"))
    new_run = cli.ok("runs", "get", fresh["id"], "--json").json()
    assert (new_run["status"], new_run["app_version"]) == ("succeeded", "v2.1")
    assert executions(markers, fresh["id"], "audit") == ["patched"]  # the new branch
    attempts = cli.ok("runs", "attempts", run_id, "--json").json()["attempts"]
    assert [(a["app_version"], a["outcome"]) for a in attempts] == [
        ("v1", "released"),
        ("v2", "parked"),
        ("v2.1", "succeeded"),
    ]
