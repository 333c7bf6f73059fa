"""The README's first example, saved as ``app.py`` and run as the README says (against
the embedded moto server, in a process of its own), prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, REPO_ROOT

README = REPO_ROOT / "README.md"
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")


def _example(text: str) -> tuple[str, str, list[str]]:
    """The ``## Example`` section's app, the script that runs it, and the output shown."""
    section = text.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    app, runner = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)[:2]
    shown = re.findall(r"^```text\n(.*?)^```$", section, re.S | re.M)[0]
    return app, runner, shown.splitlines()


def _same_ids(lines: list[str]) -> list[str]:
    return [RUN_ID.sub("<run id>", line) for line in lines]


@pytest.mark.integration
def test_the_readme_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    app, runner, shown = _example(README.read_text(encoding="utf-8"))
    (tmp_path / "app.py").write_text(app)
    (tmp_path / "run.py").write_text(runner)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RUNLANE_"))}
    env["AWS_CONFIG_FILE"] = str(tmp_path / "missing-config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "missing-credentials")
    env["PYTHONPATH"] = str(REPO_ROOT)

    done = subprocess.run(
        [sys.executable, "run.py"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    printed = done.stderr.splitlines() + done.stdout.splitlines()  # logs, then the prints
    assert _same_ids(printed) == _same_ids(shown)
