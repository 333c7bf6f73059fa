"""Integration fixtures: one moto server process per session, reset before each test."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest

from runlane_sqs import Runlane
from runlane_sqs.clock import Clock
from runlane_sqs.local import MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with MotoServer() as server:
        yield server


@pytest.fixture
def backend_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment variables that point boto3 at a freshly reset moto server."""
    moto_server.reset()
    env = moto_server.environment()
    env["RUNLANE_TABLE"] = f"runlane-{uuid.uuid4().hex[:8]}"
    env["RUNLANE_ENVIRONMENT"] = "test"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def make_app(backend_env: dict[str, str]):  # type: ignore[no-untyped-def]
    """Build a Runlane app against the moto server; ``provision=True`` creates resources."""

    def build(*, clock: Clock | None = None, **options: object) -> Runlane:
        return Runlane.from_env(clock=clock, **options) if clock else Runlane.from_env(**options)

    return build


def subprocess_env(backend_env: dict[str, str]) -> dict[str, str]:
    """The environment for worker processes: the backend plus this repo on the path."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**os.environ, **backend_env, "PYTHONPATH": root}
