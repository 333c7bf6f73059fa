"""Two maintenance processes racing over the same schedules create every occurrence's
run exactly once.

The schedules (``tests.apps.schedule_app``: four of them, 200 occurrences, all past) are
stored by an app whose clock stands before their first occurrence: to maintenance, they
have missed every occurrence. Two ``runlane-sqs maintenance run --every 1`` processes
start on the same table and environment and begin their passes together (the app
module waits for a start file), so both meet the same due occurrences in the same
passes and catch them up (catch-up ``all``: 50 per schedule per pass; the longest
schedule takes three passes) at the same time. Each occurrence's run has an id made from
(environment, schedule, occurrence) and is created by a conditional write: the loser of
a race meets the winner's run. The test then reads every run back from DynamoDB, and
what each process reported.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus, Schedule, ScheduleStatus
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.model import Run
from runlane_sqs.engine.reports import JOB_SCHEDULES
from tests.apps.schedule_app import (
    ANCHOR,
    MAINTENANCE_PERIOD_SECONDS,
    SCHEDULES,
    START_FILE_ENV,
    TICK_TASK,
    TICKS,
    ready_file,
    register_schedules,
)
from tests.emulators import REPO_ROOT, subprocess_env, wait_until

APP_SPEC = "tests.apps.schedule_app:app"
PROCESSES = 2
STARTUP_TIMEOUT = 30.0
CATCH_UP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
LIST_PAGE = 100
SCHEDULES_LOGGER = "runlane_sqs.schedules"


class MaintenanceProcess:
    """``runlane-sqs maintenance run --every 1`` in a child process: its JSON reports
    (stdout) and JSON log lines (stderr) kept in files."""

    def __init__(self, env: dict[str, str], log_dir: Path, name: str) -> None:
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        argv = [sys.executable, "-m", "runlane_sqs", "--log-format", "json", "maintenance"]
        argv += ["run", "--app", APP_SPEC, "--every", str(MAINTENANCE_PERIOD_SECONDS)]
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def reports(self) -> list[dict[str, Any]]:
        """The pass reports printed so far (a line still being written is left out)."""
        lines = self.stdout_path.read_text().splitlines(keepends=True)
        return [json.loads(line) for line in lines if line.endswith("\n")]

    def schedule_jobs(self) -> list[dict[str, int]]:
        """The ``schedules`` job of each pass so far."""
        return [report["jobs"][JOB_SCHEDULES] for report in self.reports()]

    def logged_runs(self, logger: str, words: str) -> list[str]:
        """The run ids of the log records of ``logger`` whose message holds ``words``."""
        lines = self.stderr_path.read_text().splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return [
            r["run_id"]
            for r in records
            if r.get("logger") == logger and words in r.get("message", "")
        ]

    def log(self, tail: int = 4000) -> str:
        return self.stderr_path.read_text(errors="replace")[-tail:]

    def stop(self) -> int:
        """SIGTERM: the pass under way ends, then the command returns."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_TIMEOUT)

    def kill(self) -> None:
        if self.running:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def start_file(tmp_path: Path) -> Path:
    return tmp_path / "start"


@pytest.fixture
def start_maintenance(
    backend_env: dict[str, str], tmp_path: Path, start_file: Path
) -> Iterator[Callable[[], MaintenanceProcess]]:
    """Start maintenance processes against the test backend, each waiting for
    ``start_file`` before its first pass; any still running are killed."""
    started: list[MaintenanceProcess] = []

    def start() -> MaintenanceProcess:
        env = {**subprocess_env(backend_env), START_FILE_ENV: str(start_file)}
        process = MaintenanceProcess(env, tmp_path, f"maintenance-{len(started)}")
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    """The schedules stored as a maintenance pass just before their first occurrence
    left them; returns the test's own app, on the wall clock."""
    past = register_schedules(
        make_app(
            clock=ManualClock(ANCHOR - timedelta(seconds=1)),
            maintenance_period=MAINTENANCE_PERIOD_SECONDS,
        )
    )
    past.provision()
    for schedule in SCHEDULES:
        assert past.schedules.get(schedule.id).next_at == ANCHOR
    return register_schedules(make_app(maintenance_period=MAINTENANCE_PERIOD_SECONDS))


def expected_occurrences(schedule: Schedule) -> list[datetime]:
    assert schedule.end_at is not None
    return list(schedule.occurrences(ANCHOR - timedelta(milliseconds=1), schedule.end_at))


def after_each_pass(
    processes: list[MaintenanceProcess], check: Callable[[], bool]
) -> Callable[[], bool]:
    """``check``, made again only once another pass has ended: stored schedules change
    only in passes, and polling DynamoDB in between would slow the passes on moto."""
    ended = [-1]

    def condition() -> bool:
        passes = sum(len(p.reports()) for p in processes)
        if passes == ended[0]:
            return False
        ended[0] = passes
        return check()

    return condition


def listed(app: Runlane, schedule: str | None = None) -> list[Run]:
    """Every run of the environment (or of one schedule), through every page."""
    runs: list[Run] = []
    cursor: str | None = None
    while True:
        page = app.runs.list(schedule=schedule, limit=LIST_PAGE, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.cursor
        if cursor is None:
            return runs


def race(app: Runlane, processes: list[MaintenanceProcess], start_file: Path) -> None:
    """Start the processes' passes together; returns once every schedule has finished
    and the processes have stopped."""
    wait_until(
        lambda: all(ready_file(start_file, p.pid).exists() or not p.running for p in processes),
        STARTUP_TIMEOUT,
        "the maintenance processes to load",
    )
    for process in processes:
        assert process.running, process.log()
    start_file.touch()
    wait_until(
        after_each_pass(
            processes,
            lambda: all(s.status is ScheduleStatus.FINISHED for s in app.schedules.list()),
        ),
        CATCH_UP_TIMEOUT,
        "the processes to create every occurrence",
    )
    for process in processes:
        assert process.stop() == 0, process.log()


def test_two_maintenance_processes_create_every_occurrence_exactly_once(
    app: Runlane, start_maintenance: Callable[[], MaintenanceProcess], start_file: Path
) -> None:
    processes = [start_maintenance() for _ in range(PROCESSES)]
    race(app, processes, start_file)
    pass_ids = {report["pass_id"] for p in processes for report in p.reports()}

    # DynamoDB holds one run per occurrence: none twice, none missing, no other run
    everything = listed(app)
    assert len(everything) == TICKS
    by_schedule: dict[str | None, list[Run]] = {}
    for run in everything:
        by_schedule.setdefault(run.schedule_id, []).append(run)
    assert set(by_schedule) == {s.id for s in SCHEDULES}
    for schedule in SCHEDULES:
        expected = expected_occurrences(schedule)
        runs = by_schedule[schedule.id]
        assert sorted(run.scheduled_for for run in runs) == expected  # type: ignore[type-var]
        for run in runs:
            assert (run.task, run.status, run.payload) == (
                TICK_TASK,
                RunStatus.QUEUED,
                {"schedule": schedule.id},
            )
            first = app.runs.events(run.id)[0]
            assert first.type is EventType.TRIGGERED
            assert first.data == {
                "schedule": schedule.id,
                "occurrence": run.scheduled_for.isoformat(),  # type: ignore[union-attr]
                "pass": first.data["pass"],  # the pass that created it: checked below
            }
            assert first.data["pass"] in pass_ids
        state = app.schedules.get(schedule.id)
        assert (state.status, state.runs, state.last_at, state.next_at) == (
            ScheduleStatus.FINISHED,
            len(expected),
            expected[-1],
            None,
        )
    # an operator finds one schedule's runs (pages may be short: the others are left out)
    one = SCHEDULES[-1].id
    assert {run.id for run in listed(app, one)} == {run.id for run in by_schedule[one]}

    # The race was real: both first passes found due schedules, and a pass lost a write
    # (a run the other had created, or the schedule's state it had moved on).
    jobs = [p.schedule_jobs() for p in processes]
    assert all(passes[0]["examined"] > 0 for passes in jobs), jobs
    assert sum(job["conflicts"] for passes in jobs for job in passes) > 0, jobs

    # Each run was reported created by exactly one process, even by passes that started in
    # the same millisecond (the run's first event names its pass, so a refused creation
    # is never taken for the pass's own).
    created = [p.logged_runs(SCHEDULES_LOGGER, " created run ") for p in processes]
    claims = Counter(run_id for ids in created for run_id in ids)
    assert set(claims) == {run.id for run in everything}
    assert max(claims.values()) == 1, claims.most_common(3)
    for passes, ids in zip(jobs, created, strict=True):
        assert sum(job["acted"] for job in passes) == len(ids)
