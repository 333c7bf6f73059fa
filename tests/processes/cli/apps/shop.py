"""The app the acceptance tests drive through the CLI: ``tests.processes.cli.apps.shop:app``.

Built from the environment at import (in every CLI process), with a short lease so a
worker that stops without finishing is recovered within seconds.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from runlane_sqs import Batch, Debounce, RetryPolicy, Runlane, TaskContext
from tests.processes.cli.apps.names import (
    APPROVAL,
    BULK,
    CHARGE,
    CHARGE_ALL,
    CODE_ENV,
    COUNT,
    CRATE,
    DIGEST,
    ECHO,
    FAIL_ENV,
    FAIL_WITH,
    FAN_OUT,
    LEASE_SECONDS,
    MARKERS_ENV,
    NAP,
    ORDER,
    PATIENT,
    PATIENT_ASYNC,
    PINNED,
    SHIP,
)

app = Runlane.from_env(lease_duration=LEASE_SECONDS)


@app.task(name=ECHO)
def echo(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    ctx.log.info("echoing")
    return {"echo": payload}


@app.task(name=COUNT)
def count(ctx: TaskContext, payload: dict[str, Any]) -> int:
    steps = int(payload["steps"])
    for done in range(1, steps + 1):
        time.sleep(float(payload.get("pause", 0.05)))
        ctx.progress(done, steps, message=f"step {done}")
    if payload.get("fail"):
        raise RuntimeError("counted wrong")
    return steps


@app.task(name=BULK, batch=Batch(size=3, max_age=3600))
def bulk(ctx: TaskContext, items: list[Any]) -> int:
    return len(items)


@app.task(name=DIGEST, debounce=Debounce(quiet=3600))
def digest(ctx: TaskContext, payload: Any) -> Any:
    return payload


@app.task(name=FAN_OUT)
def fan_out(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    results = ctx.map(ECHO, payload["items"], max_in_flight=2)
    return {"sum": sum(r["echo"] for r in results.results()), "succeeded": results.succeeded}


@app.task(name=CHARGE_ALL, retry=RetryPolicy(max_attempts=1))
def charge_all(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    results = ctx.map(CHARGE, [{"amount": a} for a in payload["amounts"]])
    return {"total": sum(r["charged"] for r in results.results())}


@app.task(name=CHARGE, retry=RetryPolicy(max_attempts=1))
def charge(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    if os.environ.get(FAIL_ENV):
        raise RuntimeError("card declined")
    return {"charged": payload["amount"]}


@app.task(name=FAIL_WITH, retry=RetryPolicy(max_attempts=1))
def fail_with(ctx: TaskContext, payload: Any) -> None:
    """Fails at once with ``payload["message"]`` as the failure's message."""
    raise RuntimeError(payload["message"])


@app.task(name=NAP)
def nap(ctx: TaskContext, payload: Any) -> None:
    return ctx.release(delay=3600)


@app.task(name=APPROVAL)
def approval(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    decision = ctx.wait_for_token(payload["token"])
    return {"status": decision.status.value, "value": decision.value}


def _marker(ctx: TaskContext, suffix: str) -> Path:
    return Path(os.environ[MARKERS_ENV]) / f"{ctx.run_id}.{suffix}"


@app.task(name=PATIENT)
def patient(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Waits for the cancellation event; with ``stubborn``, the first attempt ignores it."""
    _marker(ctx, f"started-{ctx.attempt}").write_text(str(os.getpid()))
    if payload.get("stubborn"):
        if ctx.attempt == 1:
            time.sleep(60)
        return {"attempt": ctx.attempt}
    observed = ctx.cancellation.wait(timeout=30)
    _marker(ctx, "finished").write_text("cancelled" if observed else "not cancelled")
    return {"cancelled": observed}


@app.task(name=PATIENT_ASYNC)
async def patient_async(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """``shop.patient`` as a coroutine: awaits the cancellation; with ``stubborn``, the
    first attempt sleeps past any grace period instead."""
    _marker(ctx, f"started-{ctx.attempt}").write_text(str(os.getpid()))
    if payload.get("stubborn"):
        if ctx.attempt == 1:
            await asyncio.sleep(60)
        return {"attempt": ctx.attempt}
    try:
        await asyncio.wait_for(ctx.until_cancelled(), timeout=30)
    except TimeoutError:
        observed = False
    else:
        observed = True
    _marker(ctx, "finished").write_text("cancelled" if observed else "not cancelled")
    return {"cancelled": observed}


@app.task(name=ORDER)
def order(ctx: TaskContext, payload: Any) -> Any:
    code = os.environ.get(CODE_ENV, "v1")
    ctx.step("charge", lambda: _effect(ctx, "charge"))
    if code == "inserted" or (code == "patched" and ctx.patched("audit")):
        ctx.step("audit", lambda: _effect(ctx, "audit"))
    return ctx.wait_for_token(payload["token"]).value


def _effect(ctx: TaskContext, step: str) -> str:
    with _marker(ctx, step).open("a") as done:
        done.write(f"{os.environ.get(CODE_ENV, 'v1')}\n")
    return step


@app.task(name=PINNED, pin_version=True)
def pinned(ctx: TaskContext, payload: Any) -> Any:
    return ctx.wait_for_token(payload["token"]).value


class Parcel(BaseModel):
    order_id: int
    weight_grams: int


@dataclass
class Label:
    order_id: int
    service: str


@app.task(name=SHIP)
def ship(ctx: TaskContext, parcel: Parcel) -> Label:
    return Label(parcel.order_id, "express" if parcel.weight_grams < 1000 else "freight")


class Seal:
    """A class of the app's own: pydantic checks it with ``isinstance`` and cannot describe
    it in a JSON Schema."""


class Crate(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    seal: Seal


@app.task(name=CRATE)
def crate(ctx: TaskContext, crate: Crate) -> Label:
    return Label(0, "freight")
