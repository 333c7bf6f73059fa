"""Throughput side by side: one worker process each for runlane's sync worker, its async
worker and Celery on SQS, draining no-op runs triggered by a shallow producer.

The producer (a thread of the bench process) triggers in batches of ten while fewer
than ``AHEAD`` runs are started but not finished, so queues stay shallow and the
emulator, not queue depth, sets the pace. Completions are counted by the size of a
file each no-op appends one byte to. The time is from the first trigger to the last
completion; the worker's own CPU time (user + system, its children's included) is read
at both ends of the same phase, so start-up and imports are not counted.

Before the three systems, a sync worker drains one and a half times as many runs,
unmeasured, so DynamoDB Local's JVM has compiled its hot paths: it takes thousands of
requests to, and before this warm-up whichever system was measured first paid for it
(DynamoDB Local's CPU per run of the first system was about twice the second's, and it
bounded that system's rate; 1,500 runs drained by each worker in turn, twice: sync 7.9
then 3.4 ms per run, async 4.6 then 3.0). Each worker then first drains a fifth as many
runs again, unmeasured, to open its connections and build its lazily built clients.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import celery_peer
from bench.backends import Backend
from bench.memory import CpuTime, PeakRss
from bench.producing import DoneFile, produce
from bench.workers import ASYNC, DONE_FILE_VARIABLE, NOOP_TASK, SYNC, async_unavailable

RUNLANE_CONCURRENCY = 8
"""The same as Celery's ``-c 8`` threads, its fastest setting on these emulators."""
READY_TIMEOUT_SECONDS = 60.0
WARM_UP_SHARE = 5
"""A worker's warm-up drains ``runs // WARM_UP_SHARE`` runs before its measured phase."""
EMULATOR_WARM_UP = 1.5
"""The emulators' warm-up drains ``runs * EMULATOR_WARM_UP`` runs before any system."""


def warm_up_runs(runs: int) -> int:
    """The runs drained, unmeasured, before ``runs`` are measured."""
    return runs // WARM_UP_SHARE


Progress = Callable[[int], None]


@dataclass
class ThroughputResult:
    system: str
    runs: int
    concurrency: int
    status: str = "ok"
    """``ok``, or why there is no figure (``unavailable: ...``, ``failed: ...``)."""
    seconds: float | None = None
    peak_rss: int | None = None
    """Peak RSS of the worker process in bytes (psutil samples)."""
    self_reported_rss: int | None = None
    """The worker's own peak (``VmHWM``), exact where sampling may miss a spike (runlane
    workers only)."""
    cpu_seconds: float | None = None
    """User + system CPU seconds of the worker process, its live descendants and the
    children they waited for, from the first trigger to the last completion (psutil)."""
    cpu_processes: int | None = None
    """Processes counted in ``cpu_seconds`` (1: the worker alone, no pool children)."""
    emulator_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """The same for each emulator process (with its children), by name."""

    @property
    def worker_rss(self) -> int | None:
        """The best peak figure: the worker's own when it reported one."""
        return self.self_reported_rss or self.peak_rss

    @property
    def runs_per_second(self) -> float | None:
        return self.runs / self.seconds if self.seconds else None

    @property
    def cpu_ms_per_run(self) -> float | None:
        """The worker's CPU milliseconds per run completed in the measured phase."""
        return self.cpu_seconds * 1000 / self.runs if self.cpu_seconds is not None else None

    @property
    def emulator_cpu_ms_per_run(self) -> dict[str, float]:
        """Each emulator's CPU milliseconds per run in the same phase."""
        return {name: s * 1000 / self.runs for name, s in self.emulator_cpu_seconds.items()}

    def record(self, drained: Drained) -> None:
        self.seconds = drained.seconds
        self.peak_rss = drained.peak_rss
        self.cpu_seconds = drained.cpu.seconds
        self.cpu_processes = drained.cpu.processes
        self.emulator_cpu_seconds = {
            name: cpu.seconds for name, cpu in drained.emulators.items() if cpu.seconds is not None
        }

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "runs_per_second": self.runs_per_second,
            "worker_rss": self.worker_rss,
            "cpu_ms_per_run": self.cpu_ms_per_run,
            "emulator_cpu_ms_per_run": self.emulator_cpu_ms_per_run,
        }


@dataclass(frozen=True)
class Drained:
    """What :func:`timed_drain` measured."""

    seconds: float
    peak_rss: int
    cpu: CpuTime
    emulators: dict[str, CpuTime]


def wait_for(
    total: int, done: DoneFile, worker: subprocess.Popen[Any], deadline: float, progress: Progress
) -> float:
    """Wait for ``total`` completions; returns the time of the last one."""
    while (count := done.count()) < total:
        progress(count)
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with code {worker.returncode} after {count} runs")
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {count} of {total} runs finished in time")
        time.sleep(0.005)
    progress(total)
    return time.perf_counter()


@contextlib.contextmanager
def _stopped(worker: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    try:
        yield worker
    finally:
        if worker.stdin is not None:
            worker.stdin.close()  # a worker started with --hold exits on this
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def timed_drain(
    trigger: Callable[[int], None],
    worker: subprocess.Popen[Any],
    runs: int,
    done: DoneFile,
    progress: Progress,
    emulators: dict[str, int],
) -> Drained:
    """Produce ``runs`` runs against a ready worker, after an unmeasured warm-up: the
    time, the worker's peak RSS and its CPU time (and each emulator's), from the first
    trigger to the last completion."""
    stop = threading.Event()
    deadline = time.monotonic() + max(180.0, runs / 4)
    if warm_up := warm_up_runs(runs):
        produce(trigger, warm_up, done, stop)
        wait_for(warm_up, done, worker, deadline, lambda _: None)
        done.reset()
    producer = threading.Thread(target=produce, args=(trigger, runs, done, stop), daemon=True)
    with PeakRss(worker.pid) as rss:
        try:
            with contextlib.ExitStack() as measured:
                cpu = measured.enter_context(CpuTime(worker.pid))
                emulator_cpu = {
                    name: measured.enter_context(CpuTime(pid)) for name, pid in emulators.items()
                }
                started = time.perf_counter()
                producer.start()
                finished = wait_for(runs, done, worker, deadline, progress)
        finally:
            stop.set()
            producer.join(timeout=30)
    return Drained(finished - started, rss.peak, cpu, emulator_cpu)


def runlane_worker(
    backend: Backend, kind: str, runs: int, concurrency: int, progress: Progress
) -> ThroughputResult:
    """Runs through one ``python -m bench.workers`` process."""
    name = f"runlane {kind}"
    result = ThroughputResult(name, runs, concurrency)
    if kind == ASYNC and (reason := async_unavailable()) is not None:
        result.status = reason
        return result
    table, prefix = backend.names()
    producer_app = backend.app_for(table, prefix)
    producer_app.task(lambda ctx, payload: None, name=NOOP_TASK)
    producer_app.provision()
    with tempfile.TemporaryDirectory(prefix="runlane-bench-") as tmp:
        done = DoneFile(Path(tmp))
        env = backend.subprocess_env(
            RUNLANE_TABLE=table, RUNLANE_QUEUE_PREFIX=prefix, **{DONE_FILE_VARIABLE: str(done.path)}
        )
        total = runs + warm_up_runs(runs)
        argv = [sys.executable, "-m", "bench.workers", kind, "--runs", str(total)]
        argv += ["--concurrency", str(concurrency), "--hold"]
        log = (Path(tmp) / "worker.log").open("w+b")
        pipe = subprocess.PIPE
        process = subprocess.Popen(argv, env=env, stdin=pipe, stdout=pipe, stderr=log, text=True)
        with _stopped(process) as worker:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                log.seek(0)
                result.status = f"failed: worker did not start: {log.read()[-400:]!r}"
                return result
            try:
                result.record(
                    timed_drain(
                        lambda n: _trigger_runlane(producer_app, n),
                        worker,
                        runs,
                        done,
                        progress,
                        backend.emulators,
                    )
                )
            except (RuntimeError, TimeoutError) as exc:
                log.seek(0)
                result.status = f"failed: {exc}; worker log: {log.read()[-400:]!r}"
                return result
            report = json.loads(worker.stdout.readline() or "{}")
            result.self_reported_rss = report.get("peak_rss")
    return result


def _trigger_runlane(app: Any, count: int) -> None:
    app.trigger_many(NOOP_TASK, [None] * count)


def celery_worker(backend: Backend, runs: int, progress: Progress) -> ThroughputResult:
    """Runs through one ``celery worker --pool threads -c 8`` process."""
    result = ThroughputResult("celery", runs, celery_peer.CONCURRENCY)
    _, prefix = backend.names()
    queue = f"{prefix}celery"
    sqs = backend.client("sqs")
    url = sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    producer = celery_peer.build(queue, url)
    with tempfile.TemporaryDirectory(prefix="celery-bench-") as tmp:
        done = DoneFile(Path(tmp))
        ready = Path(tmp) / "ready"
        env = backend.subprocess_env(
            **{DONE_FILE_VARIABLE: str(done.path), celery_peer.READY_VARIABLE: str(ready)}
        )
        log = Path(tmp) / "celery.log"
        with _stopped(celery_peer.start_worker(queue, url, env, log)) as worker:
            deadline = time.monotonic() + READY_TIMEOUT_SECONDS
            while not ready.exists() and worker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if not ready.exists():
                result.status = f"failed: celery did not start: {log.read_text()[-400:]!r}"
                return result

            def trigger(count: int) -> None:
                for n in range(count):
                    producer.send_task(celery_peer.NOOP_TASK, args=[n], queue=queue)

            try:
                result.record(timed_drain(trigger, worker, runs, done, progress, backend.emulators))
            except (RuntimeError, TimeoutError) as exc:
                result.status = f"failed: {exc}; celery log: {log.read_text()[-400:]!r}"
    sqs.close()
    return result


def measure_throughput(
    backend: Backend, runs: int, progress: Callable[[str], Progress]
) -> list[ThroughputResult]:
    """Sync, async, then Celery, after the emulators' warm-up; ``progress(system)`` gives
    each one's progress callback."""
    warm_up = int(runs * EMULATOR_WARM_UP)
    runlane_worker(backend, SYNC, warm_up, RUNLANE_CONCURRENCY, lambda _: None)
    results = [
        runlane_worker(backend, kind, runs, RUNLANE_CONCURRENCY, progress(f"runlane {kind}"))
        for kind in (SYNC, ASYNC)
    ]
    results.append(celery_worker(backend, runs, progress("celery")))
    return results


def celery_ratio(
    results: list[ThroughputResult],
    system: str,
    figure: Callable[[ThroughputResult], float | None] = lambda r: r.runs_per_second,
) -> float | None:
    """``system``'s figure (runs per second unless told) over Celery's."""
    by_name = {r.system: figure(r) for r in results}
    ours, theirs = by_name.get(system), by_name.get("celery")
    return ours / theirs if ours and theirs else None


def celery_cpu_ratio(results: list[ThroughputResult], system: str) -> float | None:
    """``system``'s worker CPU per run over Celery's."""
    return celery_ratio(results, system, lambda r: r.cpu_ms_per_run)
