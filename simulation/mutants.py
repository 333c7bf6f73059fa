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

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.errors import Refused
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.groups import group_from_wire, require_running
from runlane_sqs.adapters.dynamodb.items import GroupItem
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.core.groups import COUNTED
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import RunStatus
from runlane_sqs.core.rates import Reserve
from runlane_sqs.ports.groups import Counted


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
            for module_name, dotted, make in self.patches:
                owner: Any = import_module(module_name)
                *path, name = dotted.split(".")
                for part in path:  # a method: "Class.method"
                    owner = getattr(owner, part)
                original = getattr(owner, name)
                saved.append((owner, name, original))
                setattr(owner, name, make(original))
            yield
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)


def _report_unfenced(original: Callable[..., Request]) -> Callable[..., Request]:
    """A report's write conditioned on nothing: the lease token and status are dropped."""

    def request(table: str, run: Any, token: str, report: Any) -> Request:
        sent = dict(original(table, run, token, report))
        sent.pop("ConditionExpression", None)
        names = dict(sent.get("ExpressionAttributeNames", {}))
        values = dict(sent.get("ExpressionAttributeValues", {}))
        used = str(sent.get("UpdateExpression", ""))
        sent["ExpressionAttributeNames"] = {k: v for k, v in names.items() if k in used}
        sent["ExpressionAttributeValues"] = {k: v for k, v in values.items() if k in used}
        return sent

    return request


def _final_dropped(original: Callable[..., Any]) -> Callable[..., Any]:
    """The outcome's write carries no report: the last one is lost."""

    def reporting(decide: Any, final: Any) -> Any:
        return decide

    return reporting


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


def _counted_again(original: Callable[..., Counted]) -> Callable[..., Counted]:
    """``DynamoGroupStore.count`` without its once-check (the lane still at the child's
    position): a child's outcome counted again whenever its finish is."""

    def count(
        self: Any, group_id: str, lane: int, position: int, status: RunStatus, *, start: bool
    ) -> Counted:
        x = Expressions(GroupItem)
        path = ("lanes", str(lane))
        x.add(COUNTED[status], 1)
        unsuccessful = status is not RunStatus.SUCCEEDED
        if unsuccessful:
            x.add("allowance", -1)
        if start:
            x.set(path, x.name("started"))
            x.set("started", x.plus("started", 1))
            x.require(x.compare("started", "<", x.name("positions")))
            require_running(x, unsuccessful)
        key = keys.group_key(self.environment, group_id)
        request = {"TableName": self.table, "Key": key, "ReturnValues": "ALL_NEW"}
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        sent = self._send.conditional("update_item", x.request(request))
        if isinstance(sent, Refused):
            return Counted(False, group_from_wire(sent.item) if sent.item else None)
        return Counted(True, group_from_wire(sent["Attributes"]))

    return count


def _published_first(original: Callable[..., None]) -> Callable[..., None]:
    """``Transaction._send`` that publishes its runs' wakeups before it sends them."""

    def send(self: Any) -> None:
        self._engine.publisher.publish_new([new.run for new in self._new])
        original(self)

    return send


def _removed_anyway(original: Callable[..., bool]) -> Callable[..., bool]:
    """``DynamoObjectRecords.remove`` that deletes a listed record whatever still holds it."""

    def remove(self: Any, record: Any, now: Any) -> bool:
        key = keys.object_record_key(self.environment, record.sha256)
        self._send("delete_item", {"TableName": self.table, "Key": key})
        return True

    return remove


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
            "progress-fence",
            "a report's write is not conditioned on the attempt's lease token: a stale "
            "attempt's progress lands",
            "fenced_writes",
            (("runlane_sqs.adapters.dynamodb.runs", "progress_report", _report_unfenced),),
        ),
        Mutant(
            "progress-final",
            "the report pending when an attempt ends does not ride on its outcome's write",
            "progress_kept",
            (("runlane_sqs.engine.message", "reporting", _final_dropped),),
        ),
        Mutant(
            "rate-reservation",
            "a rate-limited claim takes the start it asks for without reserving it",
            "rate_held_at_entry",
            (("runlane_sqs.engine.engine", "reserve", _reservation_ignored),),
        ),
        Mutant(
            "join-once",
            "a group counts a child's outcome again whenever its finish runs again",
            "no_lost_run",
            (("runlane_sqs.adapters.dynamodb.groups", "DynamoGroupStore.count", _counted_again),),
        ),
        Mutant(
            "publish-first",
            "a transaction publishes its runs' wakeups before it commits",
            "wakeups_after_writes",
            (("runlane_sqs.api.transactions", "Transaction._send", _published_first),),
        ),
        Mutant(
            "object-removal",
            "maintenance deletes a payload object whose record still counts holders",
            "claim_checks_kept",
            (
                (
                    "runlane_sqs.adapters.dynamodb.objects",
                    "DynamoObjectRecords.remove",
                    _removed_anyway,
                ),
            ),
        ),
    )
}
