"""``runlane-sqs runs watch``: a caller follows a run's progress while a worker works on
it, and the exit code says how it ended, as ``runs wait``'s does. Its stdout is a pipe
here, so it prints one plain line per change (a terminal gets rich's live bar)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.processes.cli.apps.names import COUNT
from tests.processes.cli.conftest import (
    CLI_TIMEOUT_SECONDS,
    REPO_ROOT,
    Cli,
    command,
    wait_until,
)

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


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_watch_in_a_real_terminal_draws_a_live_bar_and_exits_with_the_run_s_code(
    cli: Cli, provisioned: dict[str, str], tmp_path: Path
) -> None:
    """``runs watch`` in a tmux pane (a terminal: rich draws its bar in place), read with
    ``capture-pane`` while a worker reports; the shell records its exit code."""
    run_id = _trigger(cli, {"steps": 30, "pause": 0.1})
    failing = _trigger(cli, {"steps": 2, "pause": 0, "fail": True})
    socket = f"runlane-watch-{uuid.uuid4().hex[:8]}"

    def tmux(*args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", socket, *args],
            env=cli.environment(),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout

    def watch_in_pane(name: str, watched: str) -> Path:
        code = tmp_path / f"{name}.code"
        shell = f"{shlex.join(command('runs', 'watch', watched))}; echo $? > {code}; sleep 30"
        tmux("new-session", "-d", "-s", name, "-x", "150", "-y", "30", shell)
        return code

    try:
        code = watch_in_pane("ok", run_id)
        wait_until(
            lambda: "no progress reported yet" in tmux("capture-pane", "-p", "-t", "ok"),
            CLI_TIMEOUT_SECONDS,
            "runs watch to draw the queued run",
        )
        worker = cli.start("worker", "--drain")
        screens: list[str] = []

        def finished() -> bool:
            screens.append(tmux("capture-pane", "-p", "-t", "ok"))
            return code.exists() and code.read_text().strip() != ""

        wait_until(finished, CLI_TIMEOUT_SECONDS, "runs watch to exit")
        worker.process.wait(timeout=CLI_TIMEOUT_SECONDS)
        failed_code = watch_in_pane("failed", failing)
        wait_until(
            lambda: failed_code.exists() and failed_code.read_text().strip() != "",
            CLI_TIMEOUT_SECONDS,
            "runs watch of the failed run to exit",
        )
    finally:
        tmux("kill-server")

    assert code.read_text().strip() == "0"
    assert failed_code.read_text().strip() == str(EXIT_RUN_UNSUCCESSFUL)
    drawn = [s for s in screens if "━" in s and re.search(r"running  \d+ of 30", s)]
    assert drawn, screens[-3:]  # the bar, drawn while the worker reported
    assert any("30 of 30 (100%): step 30" in s for s in screens)
