"""The top-level names are written once, in ``runlane_sqs/__init__.pyi``, and imported
on first use (``runlane_sqs/__init__.py``, PEP 562 through lazy_loader): what a type
checker reads there (each ``X as X``, so strict type checkers see it exported), what
``__all__`` lists and what each name is at run time all agree."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import runlane_sqs

STUB = Path(runlane_sqs.__file__).with_suffix(".pyi")


def stub_imports() -> dict[str, str]:
    """Name -> the module it comes from, from ``runlane_sqs/__init__.pyi``."""
    found: dict[str, str] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.Expr):
            continue  # the docstring
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        assert all(alias.asname == alias.name for alias in node.names), "write X as X"
        for alias in node.names:
            assert alias.name not in found, f"{alias.name} listed twice"
            found[alias.name] = f"runlane_sqs.{node.module}"
    return found


def test_all_lists_what_type_checkers_read_each_name_once() -> None:
    assert sorted(runlane_sqs.__all__) == sorted(stub_imports())
    assert len(runlane_sqs.__all__) == len(set(runlane_sqs.__all__))


@pytest.mark.parametrize("name", sorted(stub_imports()))
def test_each_name_is_the_object_its_module_defines(name: str) -> None:
    module = importlib.import_module(stub_imports()[name])
    assert getattr(runlane_sqs, name) is getattr(module, name)
    assert name in dir(runlane_sqs)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Nope"):
        runlane_sqs.Nope  # noqa: B018 (the lookup is the test)
    with pytest.raises(ImportError):
        exec("from runlane_sqs import Nope")
