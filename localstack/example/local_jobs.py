"""A one-task app that the docker compose stack deploys when you name no app of yours.

``RUNLANE_APP=local_jobs:app``; the consumer Lambda's handler is ``local_jobs.handler``.
Trigger from the host once the stack is up (see docs/local-localstack.md)::

    python -c "from local_jobs import app; print(app.trigger('hello', {'name': 'you'}).id)"
"""

from __future__ import annotations

from typing import Any

from runlane_sqs import Runlane
from runlane_sqs.lambdas.consumer import sqs_handler

app = Runlane.from_env()


@app.task(name="hello")
def hello(ctx: Any, payload: Any) -> Any:
    return {"greeting": f"hello, {(payload or {}).get('name', 'world')}"}


handler = sqs_handler(app)
