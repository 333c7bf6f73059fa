"""A task in a module no backend lists in ``TASK_MODULES``: the worker does not know it."""

from __future__ import annotations

try:  # Django 6
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def forgotten() -> str:
    return "never run"
