"""The client scenario of the bench (bench/clients.py) on the test backend, a few calls:
each request is measured for both clients over three rounds, the rows report CPU and
wall time, and the report prints the comparison."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from bench.backends import Backend
from bench.clients import ROUNDS, STEPS, measure_clients
from bench.report import print_clients

REQUESTS = {"UpdateItem", "GetItem", "SendMessage", "ReceiveMessage + DeleteMessageBatch"}


@pytest.fixture
def bench_backend(backend_env: dict[str, str]) -> Backend:
    return Backend("test", backend_env, "the test backend", authoritative_capacity=False)


def test_both_clients_send_each_request_and_are_compared(bench_backend: Backend) -> None:
    steps: list[int] = []
    rows = [row.to_json() for row in measure_clients(bench_backend, 3, steps.append, warm_up=1)]
    assert steps == list(range(1, STEPS + 1))
    assert {(r["kind"], r["request"]) for r in rows} == {
        (kind, request) for kind in ("botocore", "lean") for request in REQUESTS
    }
    for row in rows:
        assert len(row["rounds_cpu_us"]) == ROUNDS
        assert row["cpu_us"] > 0 and row["wall_ms"] > 0
    out = io.StringIO()
    print_clients(Console(file=out, width=150), rows)
    assert "lean / botocore" in out.getvalue() and "UpdateItem" in out.getvalue()
