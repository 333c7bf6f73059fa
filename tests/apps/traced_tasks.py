"""The task of the tracing process test (tests/processes/test_tracing_processes.py): its
first attempt fails, its second waits for a token, its third returns the token's value."""

from __future__ import annotations

from typing import Any

from runlane_sqs import RetryPolicy, Runlane, TaskContext

TRACED_TASK = "traced.approval"
SPANS_DIR_ENV = "RUNLANE_TEST_SPANS_DIR"
"""Where each worker process writes its spans and metrics (one JSON line each)."""


def register_traced(app: Runlane) -> Runlane:
    @app.task(name=TRACED_TASK, retry=RetryPolicy(max_attempts=3, delay=0))
    def approval(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise RuntimeError("the ledger was not reachable")
        ctx.log.info("waiting for approval")
        return ctx.wait_for_token(payload["token"]).value

    return app
