"""A small Django project on the runlane-sqs Django Tasks backend (docs/django.md): a shop
app whose view writes an order and enqueues its receipt in one ``transaction.atomic()``."""
