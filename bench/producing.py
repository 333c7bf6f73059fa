"""The shallow producer the throughput and limits scenarios share: it triggers in batches
of ten while fewer than ``AHEAD`` runs are started but not finished, counting
completions by the size of a file each finished run appends one byte to. Nothing here
needs Celery, so the limits scenario (and its contract test) import it without the
``bench`` extra."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

BATCH = 10
AHEAD = 40
"""Most runs started but not finished: the producer's bound on queue depth."""


class DoneFile:
    """Completions, counted as bytes appended by the no-op tasks."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "done"
        self.path.touch()

    def count(self) -> int:
        return self.path.stat().st_size

    def reset(self) -> None:
        """Count from zero again (the tasks append, so they go on writing from the start)."""
        self.path.write_bytes(b"")


def produce(
    trigger: Callable[[int], None], total: int, done: DoneFile, stop: threading.Event
) -> None:
    started = 0
    while started < total and not stop.is_set():
        if started - done.count() < AHEAD:
            batch = min(BATCH, total - started)
            trigger(batch)
            started += batch
        else:
            time.sleep(0.002)
