"""Which app the shop runs on: ``CELERY_SHOP_APP`` is ``celery`` (the default: Celery,
eager), ``runlane-memory`` (the compatibility layer over in-memory storage, a worker
draining in a thread) or ``runlane-aws`` (over DynamoDB and SQS, a real
``runlane-sqs worker`` process)."""

from __future__ import annotations

import importlib
import os
import sys

VARIABLE = "CELERY_SHOP_APP"
CELERY = "celery"
RUNLANE_MEMORY = "runlane-memory"
RUNLANE_AWS = "runlane-aws"
VARIANTS = (CELERY, RUNLANE_MEMORY, RUNLANE_AWS)
CELERY_APP = "tests.apps.celery_shop.celery_app"
RUNLANE_APP = "tests.apps.celery_shop.runlane_app"


def variant() -> str:
    chosen = os.environ.get(VARIABLE, CELERY)
    if chosen not in VARIANTS:
        raise ValueError(f"{VARIABLE} must be one of {VARIANTS}, not {chosen!r}")
    return chosen


def use_runlane_app() -> None:
    """Make ``import tests.apps.celery_shop.celery_app`` give the runlane app: call it
    before the tasks are imported."""
    if "tests.apps.celery_shop.tasks" in sys.modules:
        raise RuntimeError("the shop's tasks are imported already, on the Celery app")
    sys.modules[CELERY_APP] = importlib.import_module(RUNLANE_APP)
