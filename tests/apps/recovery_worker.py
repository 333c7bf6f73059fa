"""Worker app with a 3 s lease, for the recovery tests:
``--app tests.apps.recovery_worker:app``."""

from runlane_sqs import Runlane
from tests.apps.recovery_tasks import WORKER_LEASE_SECONDS, register_recovery

app = register_recovery(Runlane.from_env(lease_duration=WORKER_LEASE_SECONDS))
