"""The user code the infra test deploys: ``RUNLANE_APP=tests.apps.stack_app:app``
for the maintenance function and ``tests.apps.stack_app.handler`` as the
consumer function's handler, configured by nothing but the variables the stack sets on
its functions (``RUNLANE_TABLE``, ``RUNLANE_ENVIRONMENT``, ``RUNLANE_QUEUE_PREFIX``,
``RUNLANE_QUEUE_URLS``). Its clock only moves when the test moves it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runlane_sqs import ManualClock, RetryPolicy, Runlane, TaskContext
from runlane_sqs.lambdas.consumer import sqs_handler

ECHO_TASK = "stack.echo"
ORDERED_TASK = "stack.ordered"
FLAKY_TASK = "stack.flaky"
RETRY_DELAY_SECONDS = 3600
"""Beyond SQS's 15 minute delay: the retry's wakeup is maintenance's to publish."""

clock = ManualClock(datetime.now(UTC))
app = Runlane.from_env(clock=clock)


@app.task(name=ECHO_TASK)
def echo(ctx: TaskContext, payload: Any) -> Any:
    return {"echo": payload, "attempt": ctx.attempt}


@app.task(name=ORDERED_TASK, queue="ordered")
def ordered(ctx: TaskContext, payload: Any) -> Any:
    return {"ordered": payload}


@app.task(
    name=FLAKY_TASK,
    retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=RETRY_DELAY_SECONDS),
)
def flaky(ctx: TaskContext, payload: Any) -> Any:
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt always fails")
    return {"attempt": ctx.attempt}


handler = sqs_handler(app)
