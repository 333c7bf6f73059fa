"""The maintenance Lambda: an EventBridge schedule (every minute) invokes ``handler``.

Environment: ``RUNLANE_APP`` (``module:attribute`` of your app, so maintenance knows each
task's retry policy) plus the usual ``RUNLANE_*`` / ``AWS_*`` variables. Each invocation
runs one pass within the Lambda's remaining time and returns its report; the pass logs
it once, as the ``report`` field of its line (a JSON log format shows it; the template
sets one). Cursors live in DynamoDB, so invocations share no memory but the app.
"""

from __future__ import annotations

import logging
from typing import Any

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.loading import load_app
from runlane_sqs.lambdas.deadline import LambdaContext

log = logging.getLogger("runlane_sqs.maintenance")
SAFETY_MARGIN_SECONDS = 5.0
"""Stop starting new pages this long before the Lambda's timeout."""

_app: Runlane | None = None


def _get_app() -> Runlane:
    global _app  # noqa: PLW0603 (the app and its clients are reused by warm invocations)
    if _app is None:
        _app = load_app()
    return _app


def handler(event: dict[str, Any] | None, context: LambdaContext | None) -> dict[str, Any]:
    """Run one maintenance pass; returns the pass report as a JSON-able dict."""
    app = _get_app()
    budget = None
    if context is not None:
        budget = max(1.0, context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_SECONDS)
    try:
        return app.maintenance.run_pass(time_budget_seconds=budget).to_json()
    finally:  # the function may be frozen until its next invocation
        app.engine.observer.flush()
