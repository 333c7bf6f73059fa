"""The worker and maintenance processes, and the signals the harness sends them.

Workers are the real CLI, ``python -m runlane_sqs worker --app chaos.app:app``: sync
ones on the ``sync`` queue, asyncio ones (``--async``) on the ``async`` queue. Every
SIGKILL and SIGSTOP/SIGCONT is recorded with its time, so the ledger can tell which
executions a signal explains."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.app import ASYNC_QUEUE, MAINTENANCE_SECONDS, SYNC_QUEUE

APP = "chaos.app:app"
SYNC = "sync"
ASYNC = "async"
GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class Signalled:
    """A signal the harness sent: ``kill`` (SIGKILL), ``stop`` (SIGSTOP), ``cont``."""

    action: str
    pid: int
    at: float
    """Wall-clock time (``time.time()``), comparable with the ground-truth log."""


@dataclass
class Process:
    kind: str
    popen: subprocess.Popen[bytes]
    stopped: bool = False
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return not self.killed and self.popen.poll() is None


@dataclass
class Fleet:
    """Starts, signals, replaces and stops the processes."""

    env: dict[str, str]
    log_dir: Path
    concurrency: int = 4
    workers: list[Process] = field(default_factory=list)
    maintenance: Process | None = None
    signals: list[Signalled] = field(default_factory=list)
    exits: list[tuple[int, int | None]] = field(default_factory=list)
    """Workers that exited on their own: (pid, exit code)."""

    def _spawn(self, kind: str, args: list[str]) -> Process:
        argv = [sys.executable, "-m", "runlane_sqs", "--log-format", "json", *args]
        log = (self.log_dir / f"{kind}-{len(self.workers)}-{time.time():.0f}.log").open("ab")
        with log:
            popen = subprocess.Popen(
                argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Process(kind, popen)

    def start_worker(self, kind: str) -> Process:
        queue = ASYNC_QUEUE if kind == ASYNC else SYNC_QUEUE
        args = ["worker", "--app", APP, "--queue", queue, "--concurrency", str(self.concurrency)]
        args += ["--grace-period", str(GRACE_SECONDS)]
        if kind == ASYNC:
            args.append("--async")
        process = self._spawn(kind, args)
        self.workers.append(process)
        return process

    def start_maintenance(self) -> None:
        every = str(MAINTENANCE_SECONDS)
        self.maintenance = self._spawn(
            "maintenance", ["maintenance", "run", "--app", APP, "--every", every]
        )

    def live(self) -> list[Process]:
        return [w for w in self.workers if w.alive and not w.stopped]

    def kill(self, process: Process) -> Process:
        """SIGKILL ``process`` and start a replacement of its kind."""
        os.kill(process.pid, signal.SIGKILL)
        self.signals.append(Signalled("kill", process.pid, time.time()))
        process.killed = True
        process.popen.wait(timeout=10)
        return self.start_worker(process.kind)

    def freeze(self, process: Process) -> None:
        os.kill(process.pid, signal.SIGSTOP)
        self.signals.append(Signalled("stop", process.pid, time.time()))
        process.stopped = True

    def thaw(self, process: Process) -> None:
        os.kill(process.pid, signal.SIGCONT)
        self.signals.append(Signalled("cont", process.pid, time.time()))
        process.stopped = False

    def replace_dead(self) -> None:
        """Start a replacement for any worker that exited by itself (and note it)."""
        for process in list(self.workers):
            if not process.killed and process.popen.poll() is not None:
                self.exits.append((process.pid, process.popen.returncode))
                process.killed = True
                self.start_worker(process.kind)

    def stop(self) -> None:
        """SIGTERM everything (SIGCONT first for a frozen one), then wait."""
        everything = [*self.workers, *([self.maintenance] if self.maintenance else [])]
        for process in everything:
            if process.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
                    os.kill(process.pid, signal.SIGTERM)
        for process in everything:
            try:
                process.popen.wait(timeout=GRACE_SECONDS + 10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.popen.wait(timeout=10)
