"""The simulation's DynamoDB answers as DynamoDB does: every request of a simulated
history (faults off), in the order the simulation applied them, is sent again to the
emulator over HTTP (the moto server, or DynamoDB Local with
``RUNLANE_TEST_BACKEND=aws-local``), and each answer must be the one the simulation got.
(The store and transport contract tests, tests/contract, also run over the simulation's
services.)"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb.items import table_definition
from simulation.processes import TABLE
from simulation.services import Faults
from simulation.simulator import Scenario, Simulation
from simulation.workload import ORDERS

QUIET = Scenario(
    runs=30,
    spread_seconds=20,
    faults=Faults.none(),
    crashes_per_minute=0,
    freezes_per_minute=0,
)


def answer(got: Any) -> Any:
    """What of an answer must agree: a refusal's code (and a cancelled transaction's
    reasons, a failed condition's item), or the items a response carries (a batch's in
    no particular order, as DynamoDB gives them)."""
    if isinstance(got, ClientError):
        error = got.response.get("Error", {})
        reasons = [r.get("Code") for r in got.response.get("CancellationReasons", [])]
        return ("refused", error.get("Code"), reasons, got.response.get("Item"))
    kept = ("Item", "Attributes", "Items", "Count", "LastEvaluatedKey")
    answered = {name: got[name] for name in kept if name in got}
    if "Responses" in got:
        items = [item for found in got["Responses"].values() for item in found]
        answered["Responses"] = sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
    return ("answered", answered)


def agree(real: Any, simulated: Any, request: Mapping[str, Any]) -> bool:
    """Whether two answers agree. ``UPDATED_NEW`` is answered with the attributes the
    update set by the simulation (as DynamoDB Local does) and with those whose value
    changed by moto: there, the emulator's must be among the simulation's, equal."""
    if real == simulated:
        return True
    if request.get("ReturnValues") != "UPDATED_NEW" or real[0] != "answered":
        return False
    ours, theirs = simulated[1].get("Attributes", {}), real[1].get("Attributes", {})
    return all(ours.get(name) == value for name, value in theirs.items())


def renamed(value: Any, names: Mapping[str, str]) -> Any:
    """A request with its tables named by ``names``."""
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, inner in value.items():
        if key == "TableName":
            out[key] = names.get(inner, inner)
        elif key == "RequestItems":
            out[key] = {names.get(t, t): renamed(v, names) for t, v in inner.items()}
        else:
            out[key] = renamed(inner, names)
    return out


def test_a_simulated_history_gets_the_same_answers_from_the_emulator(dynamodb: Any) -> None:
    simulation = Simulation(11, QUIET)
    recorded: list[tuple[str, dict[str, Any], Any]] = []
    simulation.dynamodb.recorded = recorded
    simulation.run()  # what it checks is the simulation's business: here, its answers
    assert len(recorded) > 500, "too short a history to prove anything"

    names = {TABLE: f"sim-{uuid.uuid4().hex[:8]}", ORDERS: f"orders-{uuid.uuid4().hex[:8]}"}
    dynamodb.create_table(**table_definition(names[TABLE]))
    dynamodb.create_table(
        TableName=names[ORDERS],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    differences = []
    for index, (operation, request, simulated) in enumerate(recorded):
        try:
            real: Any = getattr(dynamodb, operation)(**renamed(request, names))
        except ClientError as refused:
            real = refused
        if not agree(answer(real), answer(simulated), request):
            differences.append(
                f"request {index} ({operation}): {answer(real)} | {answer(simulated)}"
            )
    assert differences == [], f"{len(differences)} differ:\n" + "\n".join(differences[:5])
