"""The worker process's app: ``runlane-sqs worker --app
tests.apps.celery_shop.runlane_worker:app`` runs the shop's tasks, registered by the
unchanged ``tasks.py`` on the compatibility layer's app."""

from tests.apps.celery_shop.switch import use_runlane_app

use_runlane_app()

from tests.apps.celery_shop import tasks  # noqa: E402 (after the switch)

app = tasks.app.runlane
