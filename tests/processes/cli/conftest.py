"""Acceptance fixtures: the real ``runlane-sqs`` CLI in subprocesses against a moto server
process the tests start (one per session, reset before each test)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import Runlane
from runlane_sqs.local import MotoServer, free_port
from tests.processes.cli.apps.names import APP_SPEC, MARKERS_ENV

REPO_ROOT = Path(__file__).resolve().parents[3]
CLI_TIMEOUT_SECONDS = 60
PARALLEL = 4


def unreachable_backend() -> tuple[str, dict[str, str]]:
    """An endpoint nothing listens on, and the environment that points the CLI at it
    with one try per request (botocore's backoff between retries would only make the
    test wait)."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    return endpoint, {"AWS_ENDPOINT_URL": endpoint, "AWS_MAX_ATTEMPTS": "1"}


"""CLI processes started at once by ``Cli.many`` (each spends most of its time importing)."""


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with MotoServer(check_signatures=True) as server:
        yield server


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


@pytest.fixture
def backend_env(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch, markers: Path
) -> dict[str, str]:
    """The variables every CLI process gets: a freshly reset moto server, a table of
    the test's own, the shop app and this repo on the path."""
    moto_server.reset()
    env = moto_server.environment()
    env["RUNLANE_TABLE"] = f"runlane-{uuid.uuid4().hex[:8]}"
    env["RUNLANE_ENVIRONMENT"] = "accept"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {
        **env,
        "RUNLANE_APP": APP_SPEC,
        "PYTHONPATH": str(REPO_ROOT),
        MARKERS_ENV: str(markers),
    }


@pytest.fixture
def provisioned(backend_env: dict[str, str]) -> dict[str, str]:
    """The backend with the table and the ``default`` queue (set up in-process)."""
    Runlane.from_env().provision(["default"])
    return backend_env


@dataclass
class Done:
    """A finished CLI process."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, f"{self.args} exited {self.code}:\n{self.stderr[-3000:]}"
        return json.loads(self.stdout)


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "runlane_sqs", *args]


class Cli:
    """Runs ``python -m runlane_sqs ...`` with the test's environment."""

    def __init__(self, env: dict[str, str], log_dir: Path, unset: tuple[str, ...] = ()) -> None:
        self.env = env
        self.log_dir = log_dir
        self.unset = unset
        self.started: list[Started] = []

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        merged = {**os.environ, **self.env, **(extra or {})}
        return {name: value for name, value in merged.items() if name not in self.unset}

    def without(self, *names: str) -> Cli:
        """A runner whose processes do not get these variables (e.g. ``RUNLANE_APP``);
        the processes it starts are stopped with this one's."""
        runner = Cli(self.env, self.log_dir, (*self.unset, *names))
        runner.started = self.started
        return runner

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Done:
        done = subprocess.run(
            command(*args),
            cwd=REPO_ROOT,
            env=self.environment(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_SECONDS,
            check=False,
        )
        return Done(args, done.returncode, done.stdout, done.stderr)

    def ok(self, *args: str, env: dict[str, str] | None = None) -> Done:
        done = self(*args, env=env)
        assert done.code == 0, f"{args} exited {done.code}:\n{done.stderr[-3000:]}"
        return done

    def many(self, commands: list[tuple[str, ...]]) -> list[Done]:
        """Run several CLI processes, ``PARALLEL`` at a time; results in the order given."""
        results: list[Done] = []
        for first in range(0, len(commands), PARALLEL):
            wave = commands[first : first + PARALLEL]
            processes = [
                subprocess.Popen(
                    command(*args),
                    cwd=REPO_ROOT,
                    env=self.environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for args in wave
            ]
            for args, process in zip(wave, processes, strict=True):
                out, err = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
                results.append(Done(args, process.returncode, out, err))
        return results

    def start(self, *args: str, env: dict[str, str] | None = None) -> Started:
        """A long-running CLI process (``worker``, ``dev``), output kept in files."""
        started = Started(command(*args), self.environment(env), self.log_dir, len(self.started))
        self.started.append(started)
        return started


class Started:
    def __init__(self, argv: list[str], env: dict[str, str], log_dir: Path, index: int) -> None:
        self.stdout_path = log_dir / f"process-{index}.out"
        self.stderr_path = log_dir / f"process-{index}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def cli(backend_env: dict[str, str], tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(backend_env, tmp_path)
    yield runner
    for process in runner.started:
        process.stop()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds (real processes: no clock to move)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
