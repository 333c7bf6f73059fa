"""Fixtures of the port contract tests."""

from tests.contract.store_backends import backend, store_kind

__all__ = ["backend", "store_kind"]
