"""What a deploy that raises or removes a rate limit does, within one maintenance pass.

A run sleeping for its reserved start (docs/rate-limits.md) holds a start reserved under
the limit of its time, and its scope's TAT holds every start reserved so far. When a
deploy raises a limit (a shorter spacing or a larger burst) or removes it, those starts
are later than the new code allows. Maintenance keeps the limits it last saw, one entry
per *pattern*: a queue's or a task's scope, or the scope prefix of a task's per-key limit
(``rate#key#{task}#{per}#``). When its code's limits relax a pattern, a pass resets the
TAT of each matching scope to now and wakes each run sleeping under the pattern: due at
once, it reserves its start again under the new limit. A limit a deploy lowers needs
nothing: a new reservation is spaced by the new limit, and starts reserved before stand.

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.machine import RepublishPolicy, Transition, eager_wake_at, transition
from runlane_sqs.core.model import EventType, Run
from runlane_sqs.core.rates import RATE_SCOPE, queue_rate_scope

Spacing = tuple[int, int]
"""A limit as its claims apply it: ``(interval_us, tolerance_us)``."""
KEY_PATTERN = f"{RATE_SCOPE}#key#"


def key_pattern(task: str, per_us: int) -> str:
    """The scope prefix of every key's scope of a task's per-key limit per ``per_us``."""
    return f"{KEY_PATTERN}{task}#{per_us}#"


def matches(scope: str, pattern: str) -> bool:
    """Whether ``scope`` is the pattern's scope, or a key's scope under it."""
    return scope.startswith(pattern) if pattern.startswith(KEY_PATTERN) else scope == pattern


def relaxed(seen: Mapping[str, Spacing], now: Mapping[str, Spacing]) -> list[str]:
    """The patterns of ``seen`` whose limit ``now`` raised (a shorter spacing, a larger
    tolerance) or removed, in order."""
    changed = []
    for pattern, (interval, tolerance) in sorted(seen.items()):
        current = now.get(pattern)
        if current is None or current[0] < interval or current[1] > tolerance:
            changed.append(pattern)
    return changed


def sleeps_under(run: Run, pattern: str) -> bool:
    """Whether ``run`` sleeps for a start reserved in a scope of ``pattern``."""
    if run.rate_start is None or not run.status.is_runnable:
        return False
    if pattern.startswith(KEY_PATTERN):
        return run.concurrency_key is not None and pattern.startswith(f"{KEY_PATTERN}{run.task}#")
    return pattern == queue_rate_scope(run.queue) or pattern.startswith(
        f"{RATE_SCOPE}#task#{run.task}#"
    )


def wake_for_new_limit(
    run: Run, pattern: str, *, now: datetime, republish: RepublishPolicy
) -> Transition:
    """A deploy relaxed the limit ``run`` sleeps for: it is due now and reserves its start
    again (the caller publishes its wakeup)."""
    now = truncate_ms(now)
    return transition(
        run,
        now,
        [(EventType.RATE_LIMIT_CHANGED, {"limit": pattern})],
        None,
        due_at=now,
        wake_at=eager_wake_at(now, now, republish),
        publishes=0,
        rate_start=None,
    )
