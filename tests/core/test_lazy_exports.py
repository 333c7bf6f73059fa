"""The top-level names are imported on first use (``runlane_sqs/__init__.py``, PEP 562):
what a type checker reads (the ``TYPE_CHECKING`` imports, each ``X as X`` so strict
type checkers see it exported), what ``__all__`` lists and where each name is looked up
at run time all agree."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import runlane_sqs

INIT = Path(runlane_sqs.__file__)


def type_checking_imports() -> dict[str, set[str]]:
    """Module -> names, from the ``if TYPE_CHECKING:`` block of ``runlane_sqs/__init__.py``."""
    tree = ast.parse(INIT.read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    )
    found: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        assert all(alias.asname == alias.name for alias in node.names), "write X as X"
        found.setdefault(node.module, set()).update(alias.name for alias in node.names)
    return found


def test_the_lazy_table_is_what_type_checkers_read_and_all_lists() -> None:
    exports = {module: set(names) for module, names in runlane_sqs._EXPORTS.items()}
    assert exports == type_checking_imports()
    assert sorted(runlane_sqs._MODULE_OF) == sorted(runlane_sqs.__all__)
    assert len(runlane_sqs.__all__) == len(set(runlane_sqs.__all__))


@pytest.mark.parametrize("name", runlane_sqs.__all__)
def test_each_name_is_the_object_its_module_defines(name: str) -> None:
    module = importlib.import_module(runlane_sqs._MODULE_OF[name])
    assert getattr(runlane_sqs, name) is getattr(module, name)
    assert name in dir(runlane_sqs)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        runlane_sqs.Nope  # noqa: B018 (the lookup is the test)
    with pytest.raises(ImportError):
        exec("from runlane_sqs import Nope")
