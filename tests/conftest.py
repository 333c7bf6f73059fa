"""Test groups by what they prove, each a folder and a marker of its own:

- ``core``: pure functions and values, no I/O;
- ``engine``: the per-message path stepped by hand;
- ``contract``: each port's adapters held to one contract (memory and the emulators);
- ``behaviour``: user-visible scenarios, each written once and run on every backend (and
  with both workers where it matters);
- ``processes``: real processes: worker signals, Lambda handlers, the CLI, the stack;
- ``simulation``: the seeded simulation of the whole system (simulation/) held to what it
  promises: replayable seeds, invariants that report, mutants that are caught.

Orthogonal to the groups, ``integration`` marks every test that talks HTTP to an emulator
(the moto server, or DynamoDB Local + LocalStack with ``RUNLANE_TEST_BACKEND=aws-local``):
``-m integration`` selects them, ``-m "not integration"`` the rest. Emulator fixtures live
in ``tests/emulators.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.emulators", "pytester"]

GROUPS = ("core", "engine", "contract", "behaviour", "processes", "simulation")
EMULATOR_FIXTURES = frozenset({"session_backend", "moto_server"})
TESTS = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """Output is read as from a pipe of no set width (pytest-xdist's worker processes are
    given ``COLUMNS=80``); tests of the width set ``COLUMNS`` themselves."""
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


FLEETS = TESTS / "processes"
"""Files here start fleets of worker, Lambda and maintenance processes, each with its own
deadlines: with ``--dist loadgroup`` (``make test``) one test process runs them one after
another, first, so two fleets never share the machine's cores and the longest group does
not come last, while the other process takes the rest."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if parts and parts[0] in GROUPS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        if EMULATOR_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        # One group a file (one file's tests share its fixtures), and the fleets one.
        fleet = item.path.parent == FLEETS
        group = "fleets" if fleet else str(item.path.relative_to(TESTS))
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.path.parent != FLEETS)  # stable: the fleets first
