"""Triggers that gather into their key's pending run: a debounce's collapses
(:mod:`.debouncing`) and a batch's items (:mod:`.batching`).

Both keep the key's pending run in a key record that the run's creation claims. A
trigger reads the record; while it names a run, the trigger *joins* it (one conditional
write that holds only while the run has not started). A refused join either joins again
(the run changed under a read the join made) or takes the key over: the trigger creates
its own run and claims the key from the run it found. Concurrent first triggers meet at
the record: the one whose claim is refused joins the run that won.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import ConflictError, PayloadTooLarge, StorageUnavailable
from runlane_sqs.core.model import KeyKind, Run, RunEvent
from runlane_sqs.engine.values import Prepared
from runlane_sqs.ports.keys import KeyClaim, KeyConflict, KeyHolder
from runlane_sqs.ports.store import RunStore

MAX_GATHER_ROUNDS = 20
"""Reads of a key's record by one trigger while other triggers of the key keep moving it
(a join that lost to another, a run that started or filled under the trigger)."""


def gather(
    store: RunStore,
    clock: Clock,
    kind: KeyKind,
    task: str,
    key: str,
    *,
    join: Callable[[KeyHolder, datetime], Run],
    join_again: Callable[[Run | None], bool],
    create: Callable[[str | None], Run],
) -> Run:
    """The run a trigger of ``task`` with the ``kind`` key ``key`` goes to: ``join`` the
    run the key's record names (raising :class:`ConflictError` when it cannot), or
    ``create`` a run that claims the key (taking it over from the run named, if any;
    raising :class:`KeyConflict` when another trigger claimed it first). After a refused
    join, ``join_again`` says, given the run the refusal found, whether to try again."""
    previous: str | None = None
    for _ in range(MAX_GATHER_ROUNDS):
        now = clock.now()
        holder = store.keys.get_key_holder(kind, task, key, now)
        if holder is not None and holder.run_id != previous:
            try:
                return join(holder, now)
            except ConflictError as refused:
                if join_again(refused.current):
                    continue
                previous = holder.run_id  # it started, ended or is full: take the key over
        try:
            return create(previous)
        except KeyConflict:
            continue  # another trigger created the key's run first: join it
    raise StorageUnavailable(
        f"the {kind} key {key!r} of task {task!r} changed under {MAX_GATHER_ROUNDS} reads in a "
        "row; try again"
    )


def create_with_key(
    store: RunStore,
    kind: KeyKind,
    key: str,
    new: tuple[Run, RunEvent, str],
    *,
    until: datetime,
    previous: str | None,
) -> None:
    """Store the ``new`` run (with its first event and its payload as kept), claiming
    the ``kind`` key ``key`` until ``until``, taken over from the run ``previous`` if
    given. Raises :class:`KeyConflict` when another run holds the key."""
    run, event, payload_text = new
    claim = KeyClaim(kind, run.task, key, expires_at=until, previous_owner=previous)
    store.create_run(run, event, payload_text, [claim])


def check_inline(prepared: Prepared, what: str, inline_limit: int) -> None:
    """A debounced payload or a batch's item stays in its run's item (the next trigger
    replaces or appends to it with one write, which an object in the payload bucket
    could not follow): :class:`PayloadTooLarge` for one that would go to the bucket."""
    if prepared.offloaded:
        raise PayloadTooLarge(
            f"{what} (the next trigger changes it with one write, so it stays in the run's item)",
            len(prepared.data),
            inline_limit,
        )
