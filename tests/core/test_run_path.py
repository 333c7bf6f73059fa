"""One plain run reads as one story: few modules, few switches between them
(docs/design/architecture.md, "One run, from trigger to succeeded"; tools/run_path.py,
run in a process of its own so no other test's global state takes part)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tools.run_path import MAX_MODULES, MAX_SWITCHES

ROOT = Path(__file__).resolve().parents[2]


def run_path() -> tuple[list[str], str]:
    done = subprocess.run(
        [sys.executable, "tools/run_path.py", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.splitlines(), done.stdout


def test_a_plain_run_passes_through_few_modules_and_switches_few_times() -> None:
    lines, text = run_path()
    found = re.search(
        r"run path \(all threads\): (\d+) modules, (\d+) switches .* status (\w+)", text
    )
    assert found is not None, text
    modules, switches, status = int(found[1]), int(found[2]), found[3]
    assert status == "succeeded"
    assert modules <= MAX_MODULES
    assert switches <= MAX_SWITCHES
    listed = lines[2:]
    assert len(listed) == len(set(listed)) == modules  # each named once
    assert listed[0] == "runlane_sqs/api/app.py"
    assert "runlane_sqs/engine/message.py" in listed


def test_the_attempt_runs_on_the_handler_thread() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CALLING_THREAD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    calling = done.stdout.splitlines()
    _, text = run_path()
    assert "runlane_sqs/engine/context.py" in text
    assert "runlane_sqs/engine/context.py" not in calling


CALLING_THREAD = """
from tools.run_path import measure
trail, _ = measure(handler_thread=False)
print("\\n".join(trail.modules))
"""
