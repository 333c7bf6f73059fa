"""The FastAPI example of docs/transactions.md, run as written against the emulators:
placing an order writes it and its run in one transaction, and the run's endpoint waits
for the result with a timeout (504 while the run is still queued)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from runlane_sqs import Runlane

pytestmark = pytest.mark.integration
DOC = Path(__file__).resolve().parents[2] / "docs" / "transactions.md"


def example() -> str:
    """The one ``python`` block under the document's "FastAPI" heading."""
    section = DOC.read_text().split("\n## FastAPI\n", 1)[1]
    found = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert found is not None, "docs/transactions.md has no FastAPI example"
    return found.group(1)


def test_the_fastapi_example_places_an_order_and_waits_for_its_run(
    backend_env: dict[str, str], orders: str, dynamodb: Any
) -> None:
    namespace: dict[str, Any] = {"__name__": "fastapi_example"}
    exec(compile(example(), str(DOC), "exec", dont_inherit=True), namespace)
    app: Runlane = namespace["app"]
    app.provision()

    with TestClient(namespace["api"]) as client:
        placed = client.post("/orders", json={"total": "42.5", "items": ["book"]})
        assert placed.status_code == 201, placed.text
        order_id, run_id = placed.json()["order"], placed.json()["run"]
        stored = dynamodb.get_item(TableName=orders, Key={"id": {"S": order_id}})["Item"]
        assert stored["total"] == {"N": "42.5"}

        waiting = client.get(f"/runs/{run_id}", params={"timeout": 0.2})
        assert (waiting.status_code, waiting.json()) == (504, {"detail": "run is still queued"})

        assert app.worker(concurrency=1).drain() == 1
        done = client.get(f"/runs/{run_id}", params={"timeout": 5})
        assert done.json() == {"status": "succeeded", "result": {"shipped": order_id}}
        assert client.get("/runs/" + "0" * 32).status_code == 404

        refused = client.post("/orders", json={"total": "many", "items": "x"})
        assert refused.status_code == 422  # FastAPI's own validation, before any write
