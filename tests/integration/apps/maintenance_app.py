"""App for the maintenance entry points (Lambda handler, CLI):
``RUNLANE_APP=tests.integration.apps.maintenance_app:app``."""

from runlane_sqs import Runlane
from tests.integration.apps.recovery_tasks import register_recovery

app = register_recovery(Runlane.from_env())
