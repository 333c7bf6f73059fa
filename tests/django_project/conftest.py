"""The test project set up once per session, on a SQLite file in a temporary directory;
``memory`` gives its two backends (``default``: enqueue on commit; ``immediate``) over one
in-memory store with a manual clock."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import django
import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings

from runlane_sqs import ManualClock, Runlane
from runlane_sqs.django.backend import RunlaneBackend, backend_named
from runlane_sqs.testing import use_in_memory

SETTINGS_MODULE = "tests.django_project.settings"
DATABASE_VARIABLE = "DJANGO_PROJECT_DATABASE"
"""Read by the settings module, which must not be imported before it is set."""
DATABASE_DIRECTORY = Path(tempfile.mkdtemp(prefix="runlane-django-"))
atexit.register(shutil.rmtree, DATABASE_DIRECTORY, ignore_errors=True)
DATABASE = DATABASE_DIRECTORY / "db.sqlite3"

# set, not defaulted: each pytest-xdist process has a database file of its own
os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
os.environ[DATABASE_VARIABLE] = str(DATABASE)
django.setup()  # before the test modules import the shop's models and tasks


@pytest.fixture(scope="session", autouse=True)
def database() -> Path:
    """The project's tables, created once (the directory is removed at exit)."""
    call_command("migrate", verbosity=0)
    return Path(settings.DATABASES["default"]["NAME"])


@pytest.fixture
def client() -> Client:
    return Client()


@pytest.fixture
def fresh_backends() -> Iterator[None]:
    """New backend instances for the test (built from the environment it sets)."""
    with override_settings(TASKS={**settings.TASKS}):
        yield


@dataclass
class Memory:
    """Both backends of the project over one in-memory store and transport."""

    default: RunlaneBackend
    immediate: RunlaneBackend
    clock: ManualClock

    @property
    def app(self) -> Runlane:
        return self.default.app


@pytest.fixture
def memory(fresh_backends: None) -> Memory:
    default, immediate = backend_named("default"), backend_named("immediate")
    clock = use_in_memory(default.app)
    app = default.app
    immediate.app.rewire(store=app.store, transport=app.transport, clock=clock)
    return Memory(default, immediate, clock)
