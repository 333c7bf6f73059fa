"""Worker app for the exactly-once test: ``--app tests.integration.apps.counting:app``."""

from runlane_sqs import Runlane
from tests.integration.apps.tasks import register_counting

app = register_counting(Runlane.from_env())
