"""``runlane-sqs runs watch``: a caller follows a run's progress while a worker works on
it, and the exit code says how it ended, as ``runs wait``'s does. Its stdout is a pipe
here, so it prints one plain line per change (a terminal gets rich's live bar)."""

from __future__ import annotations

import json
import re

from tests.processes.cli.apps.names import COUNT
from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, Cli, wait_until

EXIT_RUN_UNSUCCESSFUL = 7
EXIT_WAIT_TIMED_OUT = 8


def _trigger(cli: Cli, payload: dict[str, object]) -> str:
    return str(cli("trigger", COUNT, "--payload", json.dumps(payload), "--json").json()["id"])


def _progress_lines(run_id: str, stdout: str) -> list[tuple[int, int]]:
    found = re.findall(rf"^run {run_id}: \w+, (\d+) of (\d+)", stdout, re.MULTILINE)
    return [(int(done), int(total)) for done, total in found]


def test_watch_prints_progress_as_it_advances_and_exits_0_on_success(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, {"steps": 40, "pause": 0.1})
    watching = cli.start("runs", "watch", run_id)
    wait_until(
        lambda: "no progress reported yet" in watching.stdout() or not watching.alive(),
        CLI_TIMEOUT_SECONDS,
        "runs watch to read the queued run",
    )

    cli.ok("worker", "--drain")

    assert watching.process.wait(timeout=CLI_TIMEOUT_SECONDS) == 0, watching.stderr()
    seen = _progress_lines(run_id, watching.stdout())
    assert seen[-1] == (40, 40)  # the last report, written with the outcome
    assert len(set(seen)) >= 3  # it advanced in between, as the worker reported
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert "succeeded" in watching.stdout()
    shown = cli("runs", "get", run_id)
    assert "40 of 40 (100%): step 40 (attempt 1" in shown.stdout
    stored = cli("runs", "get", run_id, "--json").json()["progress"]
    assert (stored["done"], stored["total"], stored["message"]) == (40, 40, "step 40")


def test_watch_exits_with_the_failure_code_when_the_run_fails(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, {"steps": 3, "pause": 0, "fail": True})
    cli.ok("worker", "--drain")

    done = cli("runs", "watch", run_id)

    assert done.code == EXIT_RUN_UNSUCCESSFUL, done.stderr
    assert f"error: run {run_id} finished failed" in done.stderr.splitlines()
    assert _progress_lines(run_id, done.stdout) == [(3, 3)]
    assert "RuntimeError: counted wrong" in done.stdout  # the run, shown as runs get shows it


def test_watch_times_out_as_wait_does(cli: Cli, provisioned: dict[str, str]) -> None:
    run_id = _trigger(cli, {"steps": 1})

    done = cli("runs", "watch", run_id, "--timeout", "0.3", "--json")

    assert done.code == EXIT_WAIT_TIMED_OUT, done.stderr
    assert json.loads(done.stdout)["status"] == "queued"
