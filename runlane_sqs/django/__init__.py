"""A Django Tasks backend on runlane-sqs (docs/django.md).

``TASKS = {"default": {"BACKEND": "runlane_sqs.django.backend.RunlaneBackend"}}`` makes
``task.enqueue(...)`` trigger a run; ``runlane-sqs worker --app
runlane_sqs.django.worker:app`` runs them with the Django project loaded. It implements
``django.tasks`` on Django 6, else the ``django-tasks`` package (the ``django`` extra).
"""
