"""Worker app of the debounce process tests (tests/processes/test_debounce_processes.py):
``--app tests.apps.debounced_worker:app``. ``digest.build`` collapses the triggers of each
``key`` after 5 s of quiet (at most a minute: a trigger slowed by a busy emulator does not
leave a key quiet); ``digest.stream`` after 2 s of quiet, at most 4 s after a run's first
trigger."""

from __future__ import annotations

from typing import Any

from runlane_sqs import Debounce, Runlane, TaskContext

BUILD = "digest.build"
STREAM = "digest.stream"
BUILD_QUIET = 5
QUIET = 2
CAP = 4


def register(app: Runlane) -> Runlane:
    @app.task(name=BUILD, debounce=Debounce(quiet=BUILD_QUIET, max_wait=60, key=lambda p: p["key"]))
    def build(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=STREAM, debounce=Debounce(quiet=QUIET, max_wait=CAP))
    def stream(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


app = register(Runlane.from_env())
