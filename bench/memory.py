"""Peak resident memory of a worker process, sampled with psutil."""

from __future__ import annotations

import threading

import psutil

SAMPLE_SECONDS = 0.02


class PeakRss:
    """Samples a process's RSS (its children's included) until stopped; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
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
                processes = [self._process, *self._process.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in processes)
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self._stop.wait(SAMPLE_SECONDS)


MIB = 1024 * 1024
