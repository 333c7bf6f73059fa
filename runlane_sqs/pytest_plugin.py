"""pytest fixtures for code that uses runlane-sqs: no AWS, no emulator.

Installed with the package (entry point ``pytest11``), so every project that depends on
runlane-sqs has them (docs/testing.md):

- ``runlane_clock``: a :class:`~runlane_sqs.testing.ManualClock`; move time with
  ``runlane_clock.advance(seconds)``;
- ``runlane_app``: a fresh in-memory app on that clock, to register tasks on;
- ``runlane_in_memory``: call it with your own app (built with ``Runlane.from_env()``)
  to run it in memory on that clock for this test; it is put back afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from runlane_sqs.api.app import Runlane
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.testing import in_memory_app, use_in_memory


@pytest.fixture
def runlane_clock() -> ManualClock:
    """A clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture
def runlane_app(runlane_clock: ManualClock) -> Runlane:
    """A fresh app over in-memory storage and transport, on ``runlane_clock``."""
    return in_memory_app(clock=runlane_clock)


@pytest.fixture
def runlane_in_memory(runlane_clock: ManualClock) -> Iterator[Callable[[Runlane], Runlane]]:
    """``runlane_in_memory(app)`` runs ``app`` in memory on ``runlane_clock`` for this
    test and returns it; its own adapters and clock come back after the test."""
    moved: list[tuple[Runlane, Callable[[], None]]] = []

    def move(app: Runlane) -> Runlane:
        store, transport, clock, objects = app.store, app.transport, app.clock, app.objects
        moved.append(
            (
                app,
                lambda: app.rewire(store=store, transport=transport, clock=clock, objects=objects),
            )
        )
        use_in_memory(app, runlane_clock)
        return app

    yield move
    for _, restore in reversed(moved):
        restore()
