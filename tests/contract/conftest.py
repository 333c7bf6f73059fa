"""Fixtures of the port contract tests."""

from tests.contract.bench_support import aws
from tests.contract.store_backends import backend, store_kind

__all__ = ["aws", "backend", "store_kind"]
