"""The shop's app after the first step of a migration: the same ``app`` name, built by
runlane-sqs's Celery compatibility layer on a runlane app configured from the
environment (``RUNLANE_TABLE``, ``AWS_ENDPOINT_URL``, ...), with the same routes."""

from runlane_sqs import Runlane
from runlane_sqs.compat.celery import Celery

app = Celery(
    "celery_shop",
    runlane=Runlane.from_env(),
    task_routes={"tests.apps.celery_shop.tasks.charge_*": {"queue": "payments"}},
)
