"""Markers by what a test proves, from the folder it lives in, so ``-m`` selects whole
groups: ``-m unit`` (pure and in-memory), ``-m integration`` (emulator processes over
HTTP), ``-m acceptance`` (the CLI as a user drives it)."""

from __future__ import annotations

from pathlib import Path

import pytest

GROUPS = ("unit", "integration", "acceptance")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(TESTS).parts
        if parts and parts[0] in GROUPS:
            item.add_marker(getattr(pytest.mark, parts[0]))
