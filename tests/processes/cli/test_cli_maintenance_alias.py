"""``python -m maintenance``, the deprecated alias of ``runlane-sqs maintenance run``: its
help names a command that works."""

from __future__ import annotations

import subprocess
import sys

from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, REPO_ROOT, command


def _help(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=True,
    )
    return done.stdout


def test_the_alias_help_shows_the_usage_of_the_command_it_stands_for() -> None:
    alias = _help("-m", "maintenance")

    assert alias.splitlines()[0] == "Usage: runlane-sqs maintenance run [OPTIONS]"
    assert alias == _help(*command("maintenance", "run")[1:])
