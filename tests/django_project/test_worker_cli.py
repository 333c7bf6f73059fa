"""``runlane-sqs worker --app runlane_sqs.django.worker:app`` with a project that cannot be
set up: a clear message and exit code 3 (app not importable), no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.emulators import REPO_ROOT

EXIT_APP_NOT_IMPORTABLE = 3


@pytest.mark.parametrize(
    ("settings_module", "said"),
    [
        (None, "set DJANGO_SETTINGS_MODULE"),
        ("tests.django_project.nowhere", "No module named 'tests.django_project.nowhere'"),
    ],
)
def test_a_project_that_cannot_be_set_up_exits_3(settings_module: str | None, said: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    if settings_module is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings_module
    done = subprocess.run(
        [sys.executable, "-m", "runlane_sqs", "worker", "--app", "runlane_sqs.django.worker:app"],
        cwd=REPO_ROOT,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_APP_NOT_IMPORTABLE, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
