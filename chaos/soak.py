"""``python -m chaos.soak [--minutes 60] [--window 10] [--rate 10] [--kill-every 120]
[--backend aws-local|moto]``: steady load for a set time, with a worker SIGKILLed (and
replaced) at a fixed period and maintenance passing every two seconds; prints, per
window of ``--window`` minutes, the workers' memory, the latencies and the errors, then
one figure line, and writes them as JSON to chaos/results/. Exits 1 if a run was lost
(docs/reliability.md, "Soak").

The load is the chaos app's (chaos/app.py) at ``--rate`` triggers a second: nine in ten
``plain`` runs (they work up to 0.2 s), one in ten ``fail_once`` (its first attempt
fails, its retry succeeds), half on the sync queue (two workers), half on the async
queue (two asyncio workers). One sync worker, the *steady* one, is never killed: its
memory over the hour is the leak check. The kills take the others in turn.

Figures per window (runs by the window they were triggered in):

- RSS of the steady worker (its last sample in the window) and the most any worker
  reached (sampled every 10 s);
- latency from trigger to the first start of the run's handler, and to its success
  (p50, p95, p99), from the executions' ground-truth log;
- errors: handler failures that were not the planned ``fail_once`` failure, trigger
  calls that failed, and the ERROR (and, apart, WARNING) log lines of the workers and
  maintenance.

At the end the harness stops triggering and waits for every run to succeed: a run
that never does is lost.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
import psutil  # type: ignore[import-untyped]

from chaos import backends
from chaos.app import (
    ASYNC_TASK,
    FAIL_ONCE,
    LOG_ENV,
    PLAIN,
    QUEUES,
    SYNC_TASK,
    build_app,
)
from chaos.fleet import ASYNC, SYNC, Fleet, Process
from runlane_sqs import Runlane, RunStatus

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SAMPLE_SECONDS = 10.0
DRAIN_SECONDS = 300.0
FAIL_SHARE = 0.1
log = logging.getLogger("chaos.soak")


@dataclass
class Window:
    """One window's figures."""

    index: int
    minutes: tuple[float, float]
    triggered: int = 0
    succeeded: int = 0
    steady_rss_mb: float | None = None
    max_rss_mb: float | None = None
    start_ms: dict[str, float] = field(default_factory=dict)
    success_ms: dict[str, float] = field(default_factory=dict)
    unplanned_failures: int = 0
    trigger_errors: int = 0
    error_log_lines: int = 0
    warning_log_lines: int = 0
    kills: int = 0

    def line(self) -> str:
        def ms(p: dict[str, float]) -> str:
            return "/".join(f"{p[k]:.0f}" for k in ("p50", "p95", "p99")) if p else "-"

        return (
            f"window {self.index} ({self.minutes[0]:.0f}-{self.minutes[1]:.0f} min): "
            f"triggered={self.triggered} succeeded={self.succeeded} "
            f"steady_rss_mb={_mb(self.steady_rss_mb)} max_rss_mb={_mb(self.max_rss_mb)} "
            f"start_ms(p50/p95/p99)={ms(self.start_ms)} success_ms={ms(self.success_ms)} "
            f"unplanned_failures={self.unplanned_failures} trigger_errors={self.trigger_errors} "
            f"error_log_lines={self.error_log_lines} warning_log_lines={self.warning_log_lines} "
            f"kills={self.kills}"
        )


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    if len(values) == 1:
        return {"p50": values[0], "p95": values[0], "p99": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": statistics.median(values), "p95": cuts[94], "p99": cuts[98]}


@dataclass
class Soak:
    backend: backends.Backend
    out_dir: Path
    minutes: float
    window_minutes: float
    rate: float
    kill_every: float
    seed: int = 0
    triggered: dict[int, tuple[float, str]] = field(default_factory=dict)
    """Index -> (wall-clock trigger time, run id)."""
    trigger_errors: list[float] = field(default_factory=list)
    samples: list[tuple[float, int, bool, int]] = field(default_factory=list)
    """(time, pid, steady, rss bytes) of each worker sample."""
    kills: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.log_path = self.out_dir / "executions.jsonl"

    def run(self) -> tuple[list[Window], dict[str, Any]]:
        tag = uuid.uuid4().hex[:8]
        os.environ.update(self.backend.environment())
        os.environ.update({"RUNLANE_TABLE": f"soak-{tag}", "RUNLANE_QUEUE_PREFIX": f"soak-{tag}-"})
        app = build_app(session=boto3.Session())
        app.provision(list(QUEUES))
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, LOG_ENV: str(self.log_path), "PYTHONPATH": path}
        fleet = Fleet(env, self.out_dir)
        began = time.time()
        try:
            steady = fleet.start_worker(SYNC)
            killable = [
                fleet.start_worker(SYNC),
                fleet.start_worker(ASYNC),
                fleet.start_worker(ASYNC),
            ]
            fleet.start_maintenance()
            stop = threading.Event()
            watcher = threading.Thread(
                target=self._watch, args=(fleet, steady, killable, stop), daemon=True
            )
            watcher.start()
            self._trigger(app, began + self.minutes * 60)
            lost = self._drain(app)
            stop.set()
            watcher.join(timeout=30)
        finally:
            fleet.stop()
        windows = self._windows(began)
        summary = {
            "minutes": self.minutes,
            "rate": self.rate,
            "runs": len(self.triggered),
            "lost": len(lost),
            "lost_runs": lost[:20],
            "kills": len(self.kills),
            "worker_exits": fleet.exits,
        }
        return windows, summary

    def _trigger(self, app: Runlane, until: float) -> None:
        """Trigger at :attr:`rate` a second until ``until`` (wall clock)."""
        i, start = 0, time.monotonic()
        while time.time() < until:
            kind = FAIL_ONCE if self.random.random() < FAIL_SHARE else PLAIN
            task = ASYNC_TASK if i % 2 else SYNC_TASK
            at = time.time()
            try:
                run = app.trigger(task, {"i": i, "kind": kind})
            except Exception as exc:
                log.warning("trigger %d failed: %s", i, exc)
                self.trigger_errors.append(at)
            else:
                self.triggered[i] = (at, run.id)
            i += 1
            pause = start + i / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def _watch(
        self, fleet: Fleet, steady: Process, killable: list[Process], stop: threading.Event
    ) -> None:
        """Sample the workers' memory; kill one of the killable workers each period."""
        next_kill = time.monotonic() + self.kill_every
        turn = 0
        while not stop.wait(SAMPLE_SECONDS):
            now = time.time()
            for process in fleet.live():
                try:
                    rss = psutil.Process(process.pid).memory_info().rss
                except psutil.Error:
                    continue
                self.samples.append((now, process.pid, process is steady, rss))
            fleet.replace_dead()
            if time.monotonic() >= next_kill:
                victim = killable[turn % len(killable)]
                if victim.alive:
                    killable[turn % len(killable)] = fleet.kill(victim)
                    self.kills.append(time.time())
                turn += 1
                next_kill += self.kill_every

    def _drain(self, app: Runlane) -> list[str]:
        """Wait for every triggered run to succeed; the ids of those that did not."""
        deadline = time.monotonic() + DRAIN_SECONDS
        pending = {run_id for _, run_id in self.triggered.values()}
        while pending and time.monotonic() < deadline:
            done = self._succeeded_in_log()
            pending -= done
            if pending:
                time.sleep(2)
        still = []
        for run_id in sorted(pending):
            status = app.runs.get_stored(run_id).status
            if status is not RunStatus.SUCCEEDED:
                still.append(f"{run_id} ({status.value})")
        return still

    def _executions(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        with self.log_path.open() as lines:
            return [json.loads(line) for line in lines if line.strip()]

    def _succeeded_in_log(self) -> set[str]:
        return {
            e["run"] for e in self._executions() if e["e"] == "end" and e.get("outcome") == "ok"
        }

    def _windows(self, began: float) -> list[Window]:
        span = self.window_minutes * 60
        count = max(1, int(-(-self.minutes * 60 // span)))
        windows = [
            Window(k, (k * self.window_minutes, min((k + 1) * self.window_minutes, self.minutes)))
            for k in range(count)
        ]

        def window_of(at: float) -> Window:
            return windows[min(count - 1, max(0, int((at - began) // span)))]

        self._latencies(windows, window_of)
        for at in self.trigger_errors:
            window_of(at).trigger_errors += 1
        for at in self.kills:
            window_of(at).kills += 1
        for at, _, is_steady, rss in self.samples:
            window = window_of(at)
            mb = rss / 2**20
            window.max_rss_mb = max(window.max_rss_mb or 0.0, mb)
            if is_steady:
                window.steady_rss_mb = mb
        for at, level in self._log_lines():
            if level == "ERROR":
                window_of(at).error_log_lines += 1
            else:
                window_of(at).warning_log_lines += 1
        return windows

    def _latencies(self, windows: list[Window], window_of: Callable[[float], Window]) -> None:
        """Each window's runs, their latencies and unplanned failures, from the log."""
        first_start: dict[str, float] = {}
        succeeded_at: dict[str, float] = {}
        failures: Counter[str] = Counter()
        for e in self._executions():
            if e["e"] == "start":
                first_start[e["run"]] = min(first_start.get(e["run"], e["t"]), e["t"])
            elif e.get("outcome") == "ok":
                succeeded_at.setdefault(e["run"], e["t"])
            elif e.get("outcome") == "fail" and not (e["kind"] == FAIL_ONCE and e["attempt"] == 1):
                failures[e["run"]] += 1
        starts: dict[int, list[float]] = {w.index: [] for w in windows}
        successes: dict[int, list[float]] = {w.index: [] for w in windows}
        for at, run_id in self.triggered.values():
            window = window_of(at)
            window.triggered += 1
            window.unplanned_failures += failures[run_id]
            if run_id in first_start:
                starts[window.index].append((first_start[run_id] - at) * 1000)
            if run_id in succeeded_at:
                window.succeeded += 1
                successes[window.index].append((succeeded_at[run_id] - at) * 1000)
        for window in windows:
            window.start_ms = percentiles(starts[window.index])
            window.success_ms = percentiles(successes[window.index])

    def _log_lines(self) -> list[tuple[float, str]]:
        """When each ERROR and WARNING line of the processes' JSON logs was written."""
        found = []
        for path in self.out_dir.glob("*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                level = record.get("level")
                if level in ("ERROR", "WARNING") and isinstance(record.get("time"), str):
                    try:
                        found.append((_epoch(record["time"]), level))
                    except ValueError:
                        continue
        return found


def _epoch(text: str) -> float:
    from datetime import datetime  # noqa: PLC0415 (only for the logs' times)

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=10.0, help="minutes per window")
    parser.add_argument("--rate", type=float, default=10.0, help="triggers a second")
    parser.add_argument("--kill-every", type=float, default=120.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=backends.BACKENDS, default=backends.AWS_LOCAL)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"runlane-soak-{stamp}"
    out_dir.mkdir(parents=True)
    with backends.start(args.backend) as backend:
        soak = Soak(
            backend, out_dir, args.minutes, args.window, args.rate, args.kill_every, args.seed
        )
        windows, summary = soak.run()
    for window in windows:
        print(window.line())
    print(
        f"soak: {summary['minutes']:g} min at {summary['rate']:g}/s ({args.backend}): "
        f"runs={summary['runs']} lost={summary['lost']} kills={summary['kills']} "
        f"worker_exits={len(summary['worker_exits'])} logs={out_dir}"
    )
    RESULTS_DIR.mkdir(exist_ok=True)
    result = {"args": vars(args), "summary": summary, "windows": [asdict(w) for w in windows]}
    (RESULTS_DIR / f"soak-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 1 if summary["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
