"""The shop's Celery app. Tests run it eagerly: tasks execute in the caller's process at
``delay()``, and their results (or exceptions) wait in the returned result."""

from celery import Celery

app = Celery("celery_shop")
app.conf.task_always_eager = True
app.conf.task_routes = {"tests.apps.celery_shop.tasks.charge_*": {"queue": "payments"}}
