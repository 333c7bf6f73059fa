"""Worker app for the concurrency-limit process tests:
``--app tests.apps.limits_app:app`` (the tasks are in ``tests.apps.limits_tasks``)."""

from runlane_sqs import Runlane
from tests.apps.limits_tasks import register_limits

app = register_limits(Runlane.from_env())
