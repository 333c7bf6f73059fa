"""Everything our code reads that is not its input, taken from the world while a
simulation runs: time (``time.sleep``, ``time.monotonic``) and entropy (``uuid.uuid4``,
``secrets.token_hex``, ``random.random``); the one thread pool a process uses (a
listing's queries of every shard at once), whose calls are made one after another on the
process's greenlet instead, each waiting in virtual time; and the host name and pid a
process names itself by.

A sleep on a process's greenlet waits in virtual time; every id, lease token and jitter
comes from the world's PRNG. String hashing must not vary either (set order): the
simulator's entry point runs under ``PYTHONHASHSEED=0``. Each patched name is listed in
:data:`PATCHED` and checked to exist, so a module that stops importing one (or starts
importing another by name) fails loudly rather than reading the real clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

from simulation.world import World

PATCHED = (
    ("time", "sleep"),
    ("time", "monotonic"),
    ("uuid", "uuid4"),
    ("secrets", "token_hex"),
    ("random", "random"),
    # bound by name at import (``from time import monotonic``)
    ("runlane_sqs.runtime.budget", "monotonic"),
    ("runlane_sqs.runtime.executor", "monotonic"),
    ("runlane_sqs.adapters.dynamodb.store", "ThreadPoolExecutor"),
    # where a process names itself: the owner of a bulk operation maintenance takes over
    ("runlane_sqs.engine.maintenance", "socket"),
    ("runlane_sqs.engine.maintenance", "os"),
)


class InLine:
    """A stand-in for ``ThreadPoolExecutor``: ``map`` calls one after another, here."""

    def __init__(self, max_workers: int | None = None) -> None:
        del max_workers

    def __enter__(self) -> InLine:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[..., Any], *iterables: Any) -> Iterator[Any]:
        return iter([fn(*args) for args in zip(*iterables, strict=True)])


class Host:
    """A stand-in for ``socket`` and ``os`` where our code names the process it runs in:
    each simulated process is a host of its own (two maintenance processes are two
    owners of a bulk operation, as two tasks of a deployment are), with the same pid in
    every interpreter."""

    def __init__(self, world: World) -> None:
        self.world = world

    def gethostname(self) -> str:
        process = self.world.current
        return process.name if process is not None else "world"

    @staticmethod
    def getpid() -> int:
        return 1


def replacements(world: World) -> dict[tuple[str, str], Any]:
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if world.current is None:  # the scheduler itself
            real_sleep(0)
            return
        world.wait(int(seconds * 1_000_000))

    def monotonic() -> float:
        return world.seconds

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=world.rng.getrandbits(128), version=4)

    def token_hex(nbytes: int | None = None) -> str:
        return world.rng.getrandbits(8 * (nbytes or 32)).to_bytes(nbytes or 32, "big").hex()

    return {
        ("time", "sleep"): sleep,
        ("time", "monotonic"): monotonic,
        ("uuid", "uuid4"): uuid4,
        ("secrets", "token_hex"): token_hex,
        ("random", "random"): world.rng.random,
        ("runlane_sqs.runtime.budget", "monotonic"): monotonic,
        ("runlane_sqs.runtime.executor", "monotonic"): monotonic,
        ("runlane_sqs.adapters.dynamodb.store", "ThreadPoolExecutor"): InLine,
        ("runlane_sqs.engine.maintenance", "socket"): Host(world),
        ("runlane_sqs.engine.maintenance", "os"): Host(world),
    }


@contextmanager
def governed_by(world: World) -> Iterator[None]:
    """Run the block with time and entropy taken from ``world``; restored after."""
    saved: list[tuple[Any, str, Any]] = []
    swaps = replacements(world)
    try:
        for module_name, name in PATCHED:
            module = import_module(module_name)
            if not hasattr(module, name):
                raise RuntimeError(f"{module_name}.{name} is gone: update simulation/determinism")
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, swaps[(module_name, name)])
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
