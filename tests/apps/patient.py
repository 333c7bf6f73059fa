"""Worker app for the shutdown tests: ``--app tests.apps.patient:app``."""

from runlane_sqs import Runlane
from tests.apps.tasks import register_patient

app = register_patient(Runlane.from_env())
