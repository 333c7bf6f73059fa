"""Sweeps over the time spans runs held a slot (tests/processes/test_concurrency_processes.py):
the most at one moment, the most keys at one moment, and how long a slot stayed free
while runs waited."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tests.apps.limits_tasks import Interval


class Span(NamedTuple):
    """One run's time on a slot: its handler as recorded outside the system, or its
    attempt as stored (``started`` to ``succeeded`` event)."""

    start: float
    end: float
    key: str


def handler_spans(intervals: Iterable[Interval]) -> list[Span]:
    return [Span(i.start, i.end, i.key) for i in intervals]


def _edges(spans: Iterable[Span]) -> list[tuple[float, int, Span]]:
    """Starts (+1) and ends (-1) in time order, an end before a start at the same time."""
    listed = list(spans)
    edges = [(s.start, 1, s) for s in listed] + [(s.end, -1, s) for s in listed]
    return sorted(edges, key=lambda e: (e[0], e[1]))


def max_overlap(spans: Iterable[Span]) -> int:
    """The most spans at one moment."""
    running = most = 0
    for _, delta, _ in _edges(spans):
        running += delta
        most = max(most, running)
    return most


def max_keys_at_once(spans: Iterable[Span]) -> int:
    """The most distinct keys at one moment."""
    running: dict[str, int] = {}
    most = 0
    for _, delta, span in _edges(spans):
        running[span.key] = running.get(span.key, 0) + delta
        most = max(most, sum(1 for n in running.values() if n > 0))
    return most


def idle_slots(spans: list[Span], limit: int) -> tuple[float, float, float]:
    """Every run was triggered before the first started, so runs waited from the first
    start until the last one. In that window, for how long did fewer than ``limit`` run:
    ``(window seconds, seconds with a slot free, free slot-seconds)``."""
    first = min(s.start for s in spans)
    last = max(s.start for s in spans)
    running = 0
    previous = first
    with_free = slot_seconds = 0.0
    for at, delta, _ in _edges(spans):
        if at > last:
            break
        if at > previous:
            if running < limit:
                with_free += at - previous
                slot_seconds += (at - previous) * (limit - running)
            previous = at
        running += delta
    return last - first, with_free, slot_seconds


def report_idle(spans: list[Span], limit: int) -> str:
    window, with_free, slot_seconds = idle_slots(spans, limit)
    handovers = len(spans) - limit
    return (
        f"while runs waited ({window:.2f} s) a slot was free for {with_free:.2f} s: "
        f"{slot_seconds:.2f} idle slot-seconds, {slot_seconds / handovers * 1000:.0f} ms "
        "per hand-over"
    )
