"""A small Celery application (a shop) and its tests, written as a Celery user writes them.

``tasks.py`` registers its tasks on ``celery_app.app``; ``services.py`` calls them. The
same tasks and tests run on Celery itself (``celery_app.py``, eager: no broker) and on
runlane-sqs's compatibility layer (``runlane_app.py``), the only change being which module
answers ``import tests.apps.celery_shop.celery_app`` (``switch.py``), as a staged
migration changes only the module that builds the app.
"""
