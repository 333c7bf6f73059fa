"""``--app`` searches the current directory after the rest of ``sys.path`` (issue 13,
item 8): a module planted in the directory an operator runs ``runlane-sqs`` from does
not shadow the real one, and an app that lives only there still loads.

These run the installed ``runlane-sqs`` script, as an operator does: ``python -m``
puts the current directory first on ``sys.path`` itself, before runlane-sqs runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, REPO_ROOT, Cli

SCRIPT = Path(sys.executable).with_name("runlane-sqs")
APP_SOURCE = "from runlane_sqs import Runlane\n\napp = Runlane.from_env()\n"
PLANTED_SOURCE = "raise RuntimeError('the planted module was imported')\n"


def _run_script(cli: Cli, cwd: Path, *path: Path, app: str) -> subprocess.CompletedProcess[str]:
    env = cli.environment({"PYTHONPATH": os.pathsep.join(map(str, [REPO_ROOT, *path]))})
    return subprocess.run(
        [str(SCRIPT), "runs", "list", "--json", "--app", app],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


@pytest.fixture
def directories(tmp_path: Path) -> tuple[Path, Path]:
    """``installed``, a directory on ``PYTHONPATH``, and ``here``, the current one."""
    installed, here = tmp_path / "installed", tmp_path / "here"
    installed.mkdir()
    here.mkdir()
    assert SCRIPT.exists(), f"{SCRIPT} is not installed (make install)"
    return installed, here


def test_a_module_planted_in_the_current_directory_does_not_shadow_the_real_one(
    cli: Cli, provisioned: dict[str, str], directories: tuple[Path, Path]
) -> None:
    installed, here = directories
    (installed / "path_app.py").write_text(APP_SOURCE)
    (here / "path_app.py").write_text(PLANTED_SOURCE)

    done = _run_script(cli, here, installed, app="path_app:app")

    assert done.returncode == 0, done.stderr
    assert "planted" not in done.stderr
    assert json.loads(done.stdout) == {"runs": [], "cursor": None}


def test_an_app_that_lives_only_in_the_current_directory_still_loads(
    cli: Cli, provisioned: dict[str, str], directories: tuple[Path, Path]
) -> None:
    _, here = directories
    (here / "here_app.py").write_text(APP_SOURCE)

    done = _run_script(cli, here, app="here_app:app")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"runs": [], "cursor": None}
