"""Worker app for the shutdown tests: ``--app tests.integration.apps.patient:app``."""

from runlane_sqs import Runlane
from tests.integration.apps.tasks import register_patient

app = register_patient(Runlane.from_env())
