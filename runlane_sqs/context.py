"""What a handler sees of its run: :class:`TaskContext`."""

from __future__ import annotations

import logging
import threading
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from runlane_sqs.core.model import Run


class RunLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose every line carries the run id, task, attempt and worker id."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


def run_logger(name: str, run: Run, worker_id: str | None = None) -> RunLogger:
    extra: dict[str, Any] = {"run_id": run.id, "task": run.task, "attempt": run.attempt}
    if worker_id is not None:
        extra["worker_id"] = worker_id
    return RunLogger(logging.getLogger(name), extra)


@dataclass
class TaskContext:
    """Passed as the first argument to every handler.

    ``cancellation`` is set when the worker shuts down, when the lease is lost, or when
    the run is cancelled: long handlers should check :attr:`cancelled` (or wait on the
    event) and return early. Setting it never stops a handler by force.
    """

    run_id: str
    task: str
    attempt: int
    environment: str
    worker_id: str
    log: RunLogger
    cancellation: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self.cancellation.is_set()
