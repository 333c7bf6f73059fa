"""Settings of the test project. The SQLite database is the file ``$DJANGO_PROJECT_DATABASE``
(the tests put it in a temporary directory, and hand it to the worker process)."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

DATABASE_VARIABLE = "DJANGO_PROJECT_DATABASE"
RUNLANE_BACKEND = "runlane_sqs.django.backend.RunlaneBackend"
TASK_MODULES = ["tests.django_project.shop.tasks"]

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "tests.django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
MIDDLEWARE: list[str] = []
INSTALLED_APPS = ["tests.django_project.shop"]
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the package's app
    INSTALLED_APPS.insert(0, "django_tasks")

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get(DATABASE_VARIABLE)
        or str(Path(tempfile.gettempdir()) / "runlane-django-project.sqlite3"),
    }
}

TASKS = {
    "default": {
        "BACKEND": RUNLANE_BACKEND,
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "TASK_MODULES": TASK_MODULES,
            "SETTINGS": {"park_after_receives": 1},
        },
    },
    "immediate": {
        "BACKEND": RUNLANE_BACKEND,
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"TASK_MODULES": TASK_MODULES, "ENQUEUE_ON_COMMIT": False},
    },
}
