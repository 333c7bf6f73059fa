"""Worker app for the exactly-once test: ``--app tests.apps.counting:app``."""

from runlane_sqs import Runlane
from tests.apps.tasks import register_counting

app = register_counting(Runlane.from_env())
