"""Replaying a run's history under the code running now (pure).

Each attempt runs the handler from the top; its durable calls (steps, and waits for a
signal, token, run or group) are answered from what earlier attempts recorded. When a
deploy changed the handler between two attempts, the new code may ask for calls the old
code never made. The rule (docs/versions.md, "When the code no longer matches"):

    An attempt may reach the recorded calls in any order, but it may make a new call
    (one no earlier attempt recorded) only once it has reached every recorded call.

A new call made while a recorded one is still unreached means the code no longer
matches the history: a step renamed or inserted before a recorded call, a wait whose
kind, target or number changed, waits reordered, a recorded step removed before new
work. The attempt stops there, before the new call does anything, and the run is parked
``history_diverged`` (or cancelled, when a cancel was requested while it ran). Code
that matches (the same calls, new calls only after every recorded one, recorded calls no
longer made at the end) is unaffected.

``ctx.release`` waits are not calls here: a release is never answered from the history
(the handler decides by itself whether to release again), so it records nothing to
reach. Nor is a wait answered at once (its target had decided when it was asked): it
records nothing either.

``ctx.patched(id)`` lets new code branch safely: at a point where every recorded call is
reached, the run is in new territory and takes the new branch, recorded as a step named
``patch:{id}`` so the answer holds on every later attempt; where recorded calls are still
ahead, the old code went on past this point and the run keeps to the old branch (that
answer stays the same without a record: the calls ahead are only ever more).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from runlane_sqs.core.errors import StepError
from runlane_sqs.core.model import JSON, EventType, Run, RunEvent, WaitKind

DIVERGED = "history_diverged"
"""The reason a run is parked when its history no longer matches the code."""


PATCH_PREFIX = "patch:"
"""Steps whose name starts with this are ``ctx.patched`` decisions, not ``ctx.step``'s."""
PATCH_SITE = "ctx.patched"
"""The call site a patch's step entry records."""
MAX_PATCH_ID_CHARS = 100


def patch_name(patch_id: str) -> str:
    """The step name a patch's decision is recorded under."""
    if not isinstance(patch_id, str) or not 0 < len(patch_id) <= MAX_PATCH_ID_CHARS:
        raise StepError(f"patch id must be 1 to {MAX_PATCH_ID_CHARS} characters")
    return f"{PATCH_PREFIX}{patch_id}"


def step_call(name: str) -> str:
    """The call of step ``name``."""
    return f"step {name}"


def wait_call(name: str) -> str:
    """The call of the wait named ``name`` (:func:`~runlane_sqs.core.waits.wait_name`)."""
    return f"wait {name}"


def recorded_calls(run: Run) -> frozenset[str]:
    """The durable calls earlier attempts of ``run`` recorded: its steps, and its waits
    that have a result (time waits have none)."""
    time_prefix = f"{WaitKind.TIME.value}:"
    return frozenset(
        [step_call(name) for name in run.steps]
        + [wait_call(name) for name in run.wait_results if not name.startswith(time_prefix)]
    )


class HistoryDiverged(BaseException):
    """Raised into the handler at a durable call the history does not allow: the
    attempt stops before that call does anything, and the run is parked.

    It derives from ``BaseException`` so that ``except Exception:`` in a handler does not
    swallow it, as :class:`~runlane_sqs.WaitRequested` does not."""

    def __init__(self, asked: str, reached: tuple[str, ...], unreached: tuple[str, ...]) -> None:
        super().__init__(
            f"the code asked for {asked!r} before reaching {len(unreached)} call(s) an earlier "
            f"attempt recorded ({', '.join(repr(c) for c in unreached)}): the handler changed "
            "under this run"
        )
        self.asked = asked
        self.reached = reached
        self.unreached = unreached

    def details(self) -> dict[str, JSON]:
        """What the park event records: the calls this attempt reached, in order, the new
        call it asked for, and the recorded calls it had not reached."""
        return {
            "reached": list(self.reached),
            "asked": self.asked,
            "unreached": list(self.unreached),
        }


@dataclass(slots=True)
class Replay:
    """One attempt's durable calls, checked against what earlier attempts recorded."""

    recorded: frozenset[str]
    reached: list[str] = field(default_factory=list)

    def unreached(self) -> bool:
        """Whether a recorded call is still to be reached."""
        return not self.recorded.issubset(self.reached)

    def call(self, call: str) -> bool:
        """Note ``call``; returns whether an earlier attempt recorded it. Raises
        :class:`HistoryDiverged` for a new call while a recorded one is unreached."""
        if call in self.reached:  # a wait checked when its group opened, then released to
            return call in self.recorded
        if call in self.recorded:
            self.reached.append(call)
            return True
        unreached = self.recorded.difference(self.reached)
        if unreached:
            raise HistoryDiverged(call, tuple(self.reached), tuple(sorted(unreached)))
        self.reached.append(call)
        return False


@dataclass(frozen=True, slots=True)
class Divergence:
    """Why a run was parked ``history_diverged``, as an operator reads it: the calls its
    history recorded, in order, next to the calls the new code made."""

    recorded: tuple[str, ...]
    """The durable calls earlier attempts recorded, in the order of the history."""
    reached: tuple[str, ...]
    """The calls the stopped attempt made, in order, before the one it was stopped at."""
    asked: str
    """The new call the history did not allow (it did nothing)."""
    unreached: tuple[str, ...]
    """The recorded calls the stopped attempt had not reached."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "recorded": list(self.recorded),
            "reached": list(self.reached),
            "asked": self.asked,
            "unreached": list(self.unreached),
        }

    @property
    def new(self) -> tuple[str, ...]:
        """The calls the new code made, in order, the stopped one last."""
        return (*self.reached, self.asked)

    def side_by_side(self) -> list[tuple[str, str]]:
        """``(recorded call, new call)`` per position; ``""`` where one side has none."""
        length = max(len(self.recorded), len(self.new))
        padded = [(*self.recorded, *[""] * length)[:length], (*self.new, *[""] * length)[:length]]
        return list(zip(padded[0], padded[1], strict=True))

    @classmethod
    def of(cls, events: Sequence[RunEvent]) -> Divergence | None:
        """The latest divergence in a run's history, if its latest park was one."""
        parks = [e for e in events if e.type is EventType.PARKED]
        if not parks or parks[-1].data.get("reason") != DIVERGED:
            return None
        park = parks[-1]
        recorded: list[str] = []
        for event in events:
            if event.seq >= park.seq:
                break
            recorded.extend(_calls_in(event))
        data = park.data
        return cls(
            recorded=tuple(recorded),
            reached=tuple(str(c) for c in _listed(data.get("reached"))),
            asked=str(data.get("asked", "")),
            unreached=tuple(str(c) for c in _listed(data.get("unreached"))),
        )


def _calls_in(event: RunEvent) -> list[str]:
    """The durable call an event of the history records, if it records one."""
    if event.type is EventType.STEP_RECORDED:
        return [step_call(str(event.data.get("step")))]
    wait = event.data.get("wait") if event.type is EventType.RELEASED else None
    if isinstance(wait, dict) and wait.get("kind") != WaitKind.TIME.value:
        return [wait_call(str(wait.get("name")))]
    return []


def _listed(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []
