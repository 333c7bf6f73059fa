"""The app a console process serves in the browser test: ``--app tests.apps.console_app:app``."""

from runlane_sqs import Runlane
from tests.apps.console_tasks import register_console_tasks

app = register_console_tasks(Runlane.from_env())
