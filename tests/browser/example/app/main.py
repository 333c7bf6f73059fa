"""The shop's app, for the console and the workers: ``--app app.main:app``."""

from runlane_sqs import Runlane

from .tasks import register_console_tasks

app = register_console_tasks(Runlane.from_env())
