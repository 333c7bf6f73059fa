"""What a worker process uses, read with psutil: its peak resident memory (sampled) and
its CPU time over a measured phase (read at the start and the end)."""

from __future__ import annotations

import threading

import psutil  # type: ignore[import-untyped]

SAMPLE_SECONDS = 0.02


def process_tree(process: psutil.Process) -> list[psutil.Process]:
    """The process and its live descendants (a forking pool's children, say)."""
    return [process, *process.children(recursive=True)]


class PeakRss:
    """Samples a process's RSS (its children's included, unless ``children=False``) until
    stopped; keeps the peak."""

    def __init__(self, pid: int, *, children: bool = True) -> None:
        self._process = psutil.Process(pid)
        self._children = children
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                tree = process_tree(self._process) if self._children else [self._process]
                rss = sum(p.memory_info().rss for p in tree)
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self._stop.wait(SAMPLE_SECONDS)


def cpu_seconds(process: psutil.Process) -> tuple[float, int]:
    """User + system CPU seconds so far of the process and its live descendants,
    including the children each of them has waited for (``cutime``, ``cstime``); and
    how many live processes that was."""
    tree = process_tree(process)
    total = 0.0
    for member in tree:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue  # just exited: its parent's children_* hold it once reaped
        total += times.user + times.system + times.children_user + times.children_system
    return total, len(tree)


class CpuTime:
    """The CPU seconds a process tree (see :func:`cpu_seconds`) spends inside the
    ``with`` block: read on entering and on leaving, so start-up before the block is not
    counted. ``seconds`` stays ``None`` if the process is gone by the end."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._start = 0.0
        self.seconds: float | None = None
        self.processes: int | None = None
        """Live processes counted at the end (1: no pool children)."""

    def __enter__(self) -> CpuTime:
        self._start, _ = cpu_seconds(self._process)
        return self

    def __exit__(self, *_: object) -> None:
        try:
            end, self.processes = cpu_seconds(self._process)
        except psutil.Error:
            return
        self.seconds = end - self._start


MIB = 1024 * 1024
