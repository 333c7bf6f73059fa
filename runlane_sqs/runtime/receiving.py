"""Receives on a daemon thread, so a stopping sync worker need not wait out a long poll.

An idle worker spends its time in SQS long polls (10 s by default). The worker's main
thread waits for a receive's result *or* for :meth:`Worker.stop`, whichever comes
first. A poll still open when the worker stops is left to finish on its daemon thread:
any messages it brings back are made visible again at once, and if the process exits
first SQS makes them visible when their visibility timeout ends. Nothing is lost
either way; a wakeup is only a hint (docs/concepts.md).
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

from runlane_sqs.ports.transport import ReceivedWakeup, WakeupTransport

log = logging.getLogger("runlane_sqs.worker")
Receipt = Future[list[ReceivedWakeup]]


class Receiver:
    """One daemon thread that performs one worker session's receives, one at a time."""

    def __init__(self, transport: WakeupTransport) -> None:
        self._transport = transport
        self._requests: queue.SimpleQueue[tuple[str, int, int, Receipt] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def receive(self, queue_name: str, max_messages: int, wait_seconds: int) -> Receipt:
        """Start a receive; its future completes with the messages or the error."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="runlane-receive", daemon=True)
            self._thread.start()
        receipt: Receipt = Future()
        self._requests.put((queue_name, max_messages, wait_seconds, receipt))
        return receipt

    def abandon(self, receipt: Receipt) -> None:
        """The worker stopped while ``receipt`` was open: release what it brings."""
        receipt.add_done_callback(self._release)

    def close(self) -> None:
        """Let the thread end after the receive it is in (a daemon: the process need not
        wait for it). A closed receiver takes no more receives."""
        self._requests.put(None)

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            queue_name, max_messages, wait_seconds, receipt = request
            if not receipt.set_running_or_notify_cancel():
                continue
            try:
                receipt.set_result(self._transport.receive(queue_name, max_messages, wait_seconds))
            except BaseException as exc:  # handed to the waiting worker
                receipt.set_exception(exc)

    def _release(self, receipt: Receipt) -> None:
        if receipt.cancelled() or receipt.exception() is not None:
            return
        messages = receipt.result()
        if messages:
            try:
                self._transport.release(messages)
            except Exception:  # SQS makes them visible at the end of their timeout
                log.warning("could not release %d message(s) at shutdown", len(messages))
