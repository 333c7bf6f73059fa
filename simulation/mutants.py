"""Test-only switches that each break one guard of the product, to prove the simulation
can fail: with a mutant on, some seed must break an invariant, and the simulation must
say which (``python -m simulation --mutant NAME``; tests/simulation holds each to the
number of seeds it may need).

A mutant replaces functions by name while the simulation runs (restored after); the
product's code has no switch of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import import_module
from typing import Any

from runlane_sqs.core.machine import Transition
from runlane_sqs.core.rates import Reserve


@dataclass(frozen=True)
class Mutant:
    """One broken guard: what it breaks, the invariant expected to catch it, and the
    replacements that break it (module, name, a function of the original)."""

    name: str
    breaks: str
    caught_by: str
    patches: tuple[tuple[str, str, Callable[[Any], Any]], ...]

    @contextmanager
    def applied(self) -> Iterator[None]:
        saved = []
        try:
            for module_name, name, make in self.patches:
                module = import_module(module_name)
                original = getattr(module, name)
                saved.append((module, name, original))
                setattr(module, name, make(original))
            yield
        finally:
            for module, name, original in reversed(saved):
                setattr(module, name, original)


def _unfenced(original: Callable[[Transition], Any]) -> Callable[[Transition], Any]:
    def write(transition: Transition) -> Any:
        return original(replace(transition, fence=None))

    return write


def _no_lease_check(original: Callable[..., None]) -> Callable[..., None]:
    def require_lease(run: Any, token: str) -> None:
        return None

    return require_lease


def _always_leased(original: Callable[..., bool]) -> Callable[..., bool]:
    def still_leased(current: Any, token: str) -> bool:
        return current is not None

    return still_leased


def _reservation_ignored(original: Callable[..., int | None]) -> Callable[..., int | None]:
    def reserve(rates: Any, reservation: Any) -> int | None:
        asked = reservation.asked
        return asked.not_before_us if isinstance(asked, Reserve) else None

    return reserve


MUTANTS = {
    mutant.name: mutant
    for mutant in (
        Mutant(
            "lease-fence",
            "an attempt no longer checks that it holds its lease: its writes are not "
            "conditioned on its lease token in storage, the state machine's check passes, "
            "and a refused outcome is decided again on whatever the run is now",
            "fenced_writes",
            (
                ("runlane_sqs.adapters.dynamodb.runs", "transition_write", _unfenced),
                ("runlane_sqs.adapters.dynamodb.slots", "transition_write", _unfenced),
                ("runlane_sqs.core.machine", "require_lease", _no_lease_check),
                ("runlane_sqs.core.waits", "require_lease", _no_lease_check),
                ("runlane_sqs.core.parking", "require_lease", _no_lease_check),
                ("runlane_sqs.engine.message", "still_leased", _always_leased),
            ),
        ),
        Mutant(
            "rate-reservation",
            "a rate-limited claim takes the start it asks for without reserving it",
            "rate_held_at_entry",
            (("runlane_sqs.engine.engine", "reserve", _reservation_ignored),),
        ),
    )
}
