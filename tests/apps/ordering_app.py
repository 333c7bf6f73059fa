"""Worker app for the ordered-runs process test:
``--app tests.apps.ordering_app:app`` (the task is in ``tests.apps.ordering_tasks``)."""

from runlane_sqs import Runlane
from tests.apps.ordering_tasks import register_ordering

app = register_ordering(Runlane.from_env())
