"""One test body, every backend: behaviour tests take ``backend`` (see tests/backends.py)
and, where the worker matters, ``worker_kind`` (the sync and the async worker, from
tests/workers.py)."""

from __future__ import annotations

import pytest

from runlane_sqs import ManualClock
from tests.backends import BACKENDS, Backend
from tests.workers import KINDS, WorkerKind


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, clock: ManualClock) -> Backend:
    return Backend(kind=request.param, clock=clock, request=request)


@pytest.fixture(params=KINDS)
def worker_kind(request: pytest.FixtureRequest) -> WorkerKind:
    return WorkerKind(request.param)
