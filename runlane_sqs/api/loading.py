"""Finding the user's app from ``module:attribute`` (CLI, Lambda and container entries),
or building one from the environment when no app is named and no task code is needed."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from runlane_sqs.api.app import Runlane
from runlane_sqs.core.errors import ConfigurationError

ENV_APP = "RUNLANE_APP"


class AppNotImportable(ConfigurationError):
    """``module:attribute`` does not name an importable :class:`Runlane` app."""


class InvalidAppSpec(AppNotImportable):
    """No app was named, or the name is not ``module:attribute``."""


def load_app(spec: str | None = None) -> Runlane:
    """Import ``spec`` (or ``$RUNLANE_APP``), e.g. ``myproject.jobs:app``; the current
    directory is searched after the rest of ``sys.path``."""
    spec = spec or os.environ.get(ENV_APP)
    if not spec:
        raise InvalidAppSpec(f"name the app as module:attribute (--app or {ENV_APP})")
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidAppSpec(f"app {spec!r} must look like module:attribute")
    if os.getcwd() not in sys.path:
        # last, not first: a module planted in the current directory must not shadow an
        # installed one of the same name (the app's own module, or one it imports)
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the user's module raised while importing
        raise AppNotImportable(f"cannot import {module_name!r} for app {spec!r}: {exc}") from exc
    return _app_in(module, spec)


def load_app_or_env(spec: str | None = None) -> Runlane:
    """The app ``spec`` (or ``$RUNLANE_APP``) names; with neither, ``Runlane.from_env()``.

    For what needs no task code: reading runs and tokens, operator actions (a retry or
    rerun takes the task, queue and payload from the stored run), signals, provisioning.
    An invalid ``RUNLANE_*`` variable raises :class:`AppNotImportable`, as it does when
    the named app's module builds itself from the environment at import.
    """
    if spec or os.environ.get(ENV_APP):
        return load_app(spec)
    try:
        return Runlane.from_env()
    except ConfigurationError as exc:
        raise AppNotImportable(f"cannot build an app from the environment: {exc}") from exc


def _app_in(module: ModuleType, spec: str) -> Runlane:
    """The app ``spec`` names in ``module``; else an error that lists the module's apps."""
    module_name, _, attribute = spec.partition(":")
    apps = [
        f"{module_name}:{name}"
        for name, value in sorted(vars(module).items())
        if isinstance(value, Runlane)
    ]
    listed = f"its Runlane apps: {', '.join(apps)}" if apps else "it holds no Runlane app"
    if not hasattr(module, attribute):
        raise AppNotImportable(f"module {module_name!r} has no attribute {attribute!r}; {listed}")
    app = getattr(module, attribute)
    if not isinstance(app, Runlane):
        found = "None" if app is None else f"a {type(app).__name__}"
        others = f"; {listed}" if apps else ""
        raise AppNotImportable(f"{spec!r} is {found}, not a Runlane app{others}")
    return app
