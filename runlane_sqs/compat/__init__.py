"""Compatibility layers that keep another framework's call sites working on runlane-sqs
during a staged migration: :mod:`runlane_sqs.compat.celery` (docs/from-celery.md)."""
