"""A worker process stopped by SIGTERM hands back at once every wakeup it received and
did not start, with the sync and the async worker (``--async``): the wakeup of a run
held for its rate limits' reserved start, those buffered behind busy slots, and one its
open long poll takes after the signal.

The queue's visibility timeout is 15 minutes here, so a wakeup visible right after the
worker exits was handed back, not timed out; a second consumer then receives it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from tests.apps.handback import BLOCKER, RATED, register
from tests.emulators import WorkerProcess, queue_counts, queue_url, wait_until

APP = "tests.apps.handback:app"
VISIBILITY_TIMEOUT_SECONDS = 900
STARTUP_SECONDS = 30
STOP_SECONDS = 30
HANDED_BACK_SECONDS = 5
"""How soon after the worker exits its wakeups must be visible: far inside the timeout."""
GRACE_SECONDS = "10"
WORKERS = pytest.mark.parametrize("flags", [(), ("--async",)], ids=["sync", "async"])


@pytest.fixture
def app(make_app: Callable[..., Runlane], sqs: Any) -> Runlane:
    app = register(make_app())
    app.provision()
    sqs.set_queue_attributes(
        QueueUrl=queue_url(sqs, app),
        Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT_SECONDS)},
    )
    return app


def _counts_become(sqs: Any, url: str, visible: int) -> None:
    expected = {"visible": visible, "in_flight": 0, "delayed": 0}
    wait_until(
        lambda: queue_counts(sqs, url) == expected,
        HANDED_BACK_SECONDS,
        f"{visible} wakeup(s) visible and none in flight (now {queue_counts(sqs, url)})",
    )


def _second_consumer(sqs: Any, url: str) -> dict[str, int]:
    """Run id -> receive count of every wakeup another consumer receives now."""
    response = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=1,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
    )
    return {
        json.loads(m["Body"])["run_id"]: int(m["Attributes"]["ApproximateReceiveCount"])
        for m in response.get("Messages", [])
    }


def _status(app: Runlane, run_id: str) -> RunStatus:
    return app.runs.get(run_id).status


@WORKERS
def test_sigterm_hands_back_a_held_wakeup_and_the_buffered_ones_at_once(
    app: Runlane,
    start_worker: Callable[..., WorkerProcess],
    sqs: Any,
    flags: tuple[str, ...],
) -> None:
    url = queue_url(sqs, app)
    app.trigger(RATED)
    assert app.worker(wait_seconds=0).drain(max_runs=1) == 1  # takes the interval's start
    held = app.trigger(RATED)  # its start is reserved 15 s ahead: the worker holds it
    blockers = [app.trigger(BLOCKER, n) for n in range(3)]  # two slots, one buffered
    worker = start_worker(
        "--app", APP, "--concurrency", "2", "--grace-period", GRACE_SECONDS, *flags
    )

    def holding() -> bool:
        assert worker.process.poll() is None, f"worker exited early:\n{worker.log()}"
        running = [b for b in blockers if _status(app, b.id) is RunStatus.RUNNING]
        return (
            f"run {held.id} waits for its rate limits' reserved start" in worker.log(20_000)
            and len(running) == 2
            and queue_counts(sqs, url) == {"visible": 0, "in_flight": 4, "delayed": 0}
        )

    wait_until(holding, STARTUP_SECONDS, "one wakeup held, two blockers running, one buffered")
    (buffered,) = [b for b in blockers if _status(app, b.id) is RunStatus.QUEUED]

    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=STOP_SECONDS) == 0, worker.log()

    _counts_become(sqs, url, visible=2)
    assert _second_consumer(sqs, url) == {held.id: 2, buffered.id: 2}
    for blocker in blockers:
        if blocker is not buffered:
            final = app.runs.get(blocker.id)
            assert (final.status, final.result) == (RunStatus.SUCCEEDED, {"cancelled": True})
    waiting = app.runs.get(held.id)
    assert (waiting.status, waiting.attempt) == (RunStatus.QUEUED, 0)


@WORKERS
def test_a_wakeup_the_open_long_poll_takes_after_sigterm_is_handed_back_at_once(
    app: Runlane,
    start_worker: Callable[..., WorkerProcess],
    sqs: Any,
    flags: tuple[str, ...],
) -> None:
    """The idle worker is in its 10 s long poll when SIGTERM comes; a run is triggered
    just after. SQS gives its wakeup to that open poll, whether or not the worker is
    still there to read the answer."""
    url = queue_url(sqs, app)
    first = app.trigger(RATED)
    worker = start_worker("--app", APP, "--grace-period", GRACE_SECONDS, *flags)

    def idle() -> bool:
        assert worker.process.poll() is None, f"worker exited early:\n{worker.log()}"
        return _status(app, first.id) is RunStatus.SUCCEEDED and queue_counts(sqs, url) == {
            "visible": 0,
            "in_flight": 0,
            "delayed": 0,
        }

    wait_until(idle, STARTUP_SECONDS, "the first run done and its wakeup deleted")

    worker.process.send_signal(signal.SIGTERM)
    late = app.trigger(BLOCKER)
    assert worker.wait(timeout=STOP_SECONDS) == 0, worker.log()

    _counts_become(sqs, url, visible=1)
    assert set(_second_consumer(sqs, url)) == {late.id}
    assert (app.runs.get(late.id).status, app.runs.get(late.id).attempt) == (RunStatus.QUEUED, 0)
