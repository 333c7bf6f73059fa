"""App for the maintenance entry points (Lambda handler, CLI):
``RUNLANE_APP=tests.apps.maintenance_app:app``."""

from runlane_sqs import Runlane
from tests.apps.recovery_tasks import register_recovery

app = register_recovery(Runlane.from_env())
