"""The worker's app: ``runlane-sqs worker --app runlane_sqs.django.worker:app``.

Reading ``app`` sets Django up (``DJANGO_SETTINGS_MODULE``), imports the ``TASK_MODULES``
of the ``TASKS`` backend ``RUNLANE_DJANGO_BACKEND`` names (default ``default``) and
returns that backend's runlane app with every task they hold registered. A run of a task
none of them holds is parked, and its result shows ``FAILED`` (docs/django.md).
"""

from __future__ import annotations

import logging
import os

import django  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.loading import AppNotImportable
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.django.backend import backend_named

log = logging.getLogger("runlane_sqs.django")
ENV_BACKEND = "RUNLANE_DJANGO_BACKEND"
ENV_SETTINGS = "DJANGO_SETTINGS_MODULE"


def worker_app(alias: str | None = None) -> Runlane:
    """Set Django up and return backend ``alias``'s app (default: ``$RUNLANE_DJANGO_BACKEND``,
    else ``default``) with the tasks of its ``TASK_MODULES`` registered."""
    from django.conf import settings  # type: ignore[import-untyped]  # noqa: PLC0415 (lazy: not a module attribute)

    if not settings.configured and not os.environ.get(ENV_SETTINGS):
        raise ImproperlyConfigured(f"set {ENV_SETTINGS} to your Django project's settings module")
    django.setup()
    backend = backend_named(alias or os.environ.get(ENV_BACKEND) or "default")
    names = backend.load_task_modules()
    if not names:
        log.warning(
            "task backend %r registers no task: list the modules that define your tasks "
            "in its OPTIONS TASK_MODULES",
            backend.alias,
        )
    return backend.app


def __getattr__(name: str) -> Runlane:
    """``app``, built on first use (importing this module does not set Django up); a
    project that cannot be set up is :class:`AppNotImportable` (the CLI exits 3)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        app = worker_app()
    except (ImproperlyConfigured, ImportError, ConfigurationError) as exc:
        raise AppNotImportable(
            f"cannot set up the Django project for {__name__}:app: {exc}"
        ) from exc
    globals()["app"] = app
    return app
