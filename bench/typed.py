"""Typed tasks: what a pydantic payload and result cost next to plain dicts
(docs/typed-tasks.md, "What it costs").

Two tasks on one app do the same work: one takes and returns a dict of about 1 KB, the
other takes an ``Order`` model of the same fields (ten lines of an order, about 1 KB as
JSON) and returns a ``Receipt`` model. For each, ``runs`` runs are triggered and then
drained by the sync worker, and this process's CPU (``time.process_time``) is read around
the triggers and around the drain: the difference per run is what validation and
conversion cost at the door and at the worker. The app is the in-memory one whatever the
backend: its plain run costs the least CPU, so the ratio is the strictest, and no
emulator's work or network wait blurs it. A warm-up round of each comes first,
uncounted; then the two tasks alternate in short rounds, and each kind's figure is the
median of its rounds, so a slower moment of the machine (another process, a garbage
collection) moves neither. The conversions themselves are also timed alone, per run.

It also checks, in a fresh interpreter, that an app whose tasks declare no type imports
no pydantic, and prints how long ``import runlane_sqs`` takes there.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from bench.cost import drainer
from runlane_sqs import Runlane, TaskContext
from runlane_sqs.engine.value_types import TaskTypes
from runlane_sqs.testing import in_memory_app

PLAIN = "bench.typed.plain"
TYPED = "bench.typed.model"
ROUNDS = 10
LINES = 10
PLAIN_APP_IMPORTS = """
import sys, time
started = time.perf_counter()
import runlane_sqs
from runlane_sqs.testing import in_memory_app
took = time.perf_counter() - started
app = in_memory_app()
app.task(lambda ctx, payload: payload, name="plain")
app.trigger("plain", {"n": 1})
print(f"{took * 1000:.1f} {'pydantic' in sys.modules}")
"""


class Line(BaseModel):
    sku: str
    quantity: int
    unit_price_cents: int
    description: str


class Order(BaseModel):
    id: int
    customer: str
    currency: str
    placed_at: str
    lines: list[Line]


class Receipt(BaseModel):
    order_id: int
    total_cents: int
    lines: list[Line]


def order(n: int) -> dict[str, Any]:
    """An order's fields, about 1 KB as compact JSON."""
    return {
        "id": n,
        "customer": f"customer-{n % 997:04d}",
        "currency": "EUR",
        "placed_at": "2026-12-01T09:30:00Z",
        "lines": [
            {
                "sku": f"sku-{n:06d}-{i}",
                "quantity": 1 + i,
                "unit_price_cents": 1999 + i,
                "description": f"line {i} of order {n}: gift wrap, ship in one parcel",
            }
            for i in range(LINES)
        ],
    }


def plain(ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
    total = sum(line["quantity"] * line["unit_price_cents"] for line in payload["lines"])
    return {"order_id": payload["id"], "total_cents": total, "lines": payload["lines"]}


def typed(ctx: TaskContext, payload: Order) -> Receipt:
    total = sum(line.quantity * line.unit_price_cents for line in payload.lines)
    return Receipt(order_id=payload.id, total_cents=total, lines=payload.lines)


@dataclass
class TypedResult:
    runs: int
    trigger_ms: dict[str, float]
    """CPU per trigger, by kind (plain, typed)."""
    worker_ms: dict[str, float]
    """CPU per run drained, by kind."""
    conversion_us: float
    """The three conversions of a typed run alone (trigger, handler's payload, result)."""
    import_ms: float
    plain_app_imports_pydantic: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "trigger_cpu_ms_per_run": self.trigger_ms,
            "worker_cpu_ms_per_run": self.worker_ms,
            "trigger_ratio": self.trigger_ms["typed"] / self.trigger_ms["plain"],
            "worker_ratio": self.worker_ms["typed"] / self.worker_ms["plain"],
            "conversions_us_per_run": self.conversion_us,
            "import_runlane_sqs_ms": self.import_ms,
            "plain_app_imports_pydantic": self.plain_app_imports_pydantic,
        }


def measure_typed(runs: int) -> TypedResult:
    app = in_memory_app()
    app.task(plain, name=PLAIN)
    model = app.task(typed, name=TYPED)
    drain = drainer(wait_seconds=0)
    trigger_cpu: dict[str, list[float]] = {"plain": [], "typed": []}
    worker_cpu: dict[str, list[float]] = {"plain": [], "typed": []}
    per_round = max(1, runs // ROUNDS)
    kinds = (
        ("plain", PLAIN, order),
        ("typed", TYPED, lambda n: Order.model_validate(order(n))),
    )
    for _, task, make in kinds:  # a warm-up round of each, neither counted nor timed
        for n in range(per_round):
            app.trigger(task, make(n))
        _drain_all(app, drain, per_round)
    for round_no in range(ROUNDS):
        for kind, task, make in kinds:
            payloads = [make(round_no * per_round + n) for n in range(per_round)]
            started = time.process_time()
            for value in payloads:
                app.trigger(task, value)
            trigger_cpu[kind].append(time.process_time() - started)
            started = time.process_time()
            drained = _drain_all(app, drain, per_round)
            worker_cpu[kind].append(time.process_time() - started)
            if drained != per_round:
                raise RuntimeError(f"{kind}: drained {drained} of {per_round} runs")
    total = per_round * ROUNDS
    import_ms, imports_pydantic = _plain_app_imports()
    return TypedResult(
        runs=total,
        conversion_us=_conversions_us(model.types),
        trigger_ms={k: statistics.median(v) * 1000 / per_round for k, v in trigger_cpu.items()},
        worker_ms={k: statistics.median(v) * 1000 / per_round for k, v in worker_cpu.items()},
        import_ms=import_ms,
        plain_app_imports_pydantic=imports_pydantic,
    )


def _conversions_us(types: TaskTypes, rounds: int = 2000) -> float:
    """The CPU of one typed run's conversions: its trigger's payload, the handler's
    payload and its result, in µs."""
    given = Order.model_validate(order(1))
    stored = types.trigger_payload(given)[1]
    returned = typed(None, given)  # type: ignore[arg-type]  # the handler reads no context
    started = time.process_time()
    for _ in range(rounds):
        types.trigger_payload(given)
        types.handler_payload(stored)
        types.stored_result(returned)
    return (time.process_time() - started) * 1e6 / rounds


def _drain_all(app: Runlane, drain: Any, expected: int) -> int:
    drained = 0
    for _ in range(10):
        drained += drain(app)
        if drained >= expected:
            break
    return drained


def _plain_app_imports() -> tuple[float, bool]:
    """``import runlane_sqs`` in a fresh interpreter (ms), and whether an app with a plain
    task imported pydantic there."""
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_APP_IMPORTS],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    took, imported = done.stdout.split()
    return float(took), imported == "True"


def print_typed(data: dict[str, Any]) -> None:
    """One line of figures from :meth:`TypedResult.to_json`."""
    trigger, worker = data["trigger_cpu_ms_per_run"], data["worker_cpu_ms_per_run"]
    imported = "imports" if data["plain_app_imports_pydantic"] else "does not import"
    print(
        f"typed tasks ({data['runs']} runs each, 1 KB payload and result, in memory): "
        f"trigger CPU {trigger['plain']:.3f} ms plain, {trigger['typed']:.3f} ms pydantic "
        f"({data['trigger_ratio']:.2f}x); worker CPU {worker['plain']:.3f} ms plain, "
        f"{worker['typed']:.3f} ms pydantic ({data['worker_ratio']:.2f}x; target at most "
        f"1.05x); the conversions alone {data['conversions_us_per_run']:.0f} us a run; "
        f"import runlane_sqs {data['import_runlane_sqs_ms']:.0f} ms, a plain app {imported} "
        "pydantic"
    )
