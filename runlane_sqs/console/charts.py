"""The runs page's counts and its chart of outcomes per minute, built from
``app.health.activity()``: pure functions, no I/O, drawn as SVG by the template."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from runlane_sqs.core.health import OUTCOMES, Activity
from runlane_sqs.core.indexes import ACTIVE
from runlane_sqs.core.model import RunStatus

BAR = 10
GAP = 2
HEIGHT = 120
UNFINISHED = [s.value for s in RunStatus if not s.is_terminal and s is not RunStatus.PARKED]


@dataclass(frozen=True, slots=True)
class Tile:
    """One count at the top of the runs page, linking to the runs it counts."""

    label: str
    count: str
    href: str
    group: str


@dataclass(frozen=True, slots=True)
class Segment:
    """One outcome's part of one minute's bar."""

    outcome: str
    x: int
    y: float
    height: float
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    segments: list[Segment]
    unread: list[int]
    """The x of each minute not wholly read (a bounded read stopped inside it)."""
    peak: int
    first: datetime
    last: datetime
    total: int


def _runs_url(statuses: list[str], since: datetime | None = None) -> str:
    query = [("status", status) for status in statuses]
    if since is not None:
        query.append(("created_after", since.isoformat()))  # to the microsecond, as counted
    return f"/runs?{urlencode(query)}"


def tiles(activity: Activity) -> list[Tile]:
    """Unfinished and parked runs of any age, then each outcome in the window."""
    found = [
        Tile("unfinished", str(activity.unfinished), _runs_url(UNFINISHED), ACTIVE),
        Tile("parked", str(activity.parked), _runs_url(["parked"]), "parked"),
    ]
    more = "" if activity.complete else "+"
    for outcome in OUTCOMES:
        count = f"{activity.counts[outcome]:,}{more}"
        found.append(Tile(outcome, count, _runs_url([outcome], activity.covered_from), outcome))
    return found


def outcomes_chart(activity: Activity) -> Chart:
    """A stacked bar per minute (succeeded at the bottom), scaled to the busiest one."""
    minutes = activity.minutes
    peak = max((minute.total for minute in minutes), default=0)
    scale = HEIGHT / peak if peak else 0.0
    segments: list[Segment] = []
    unread: list[int] = []
    for index, minute in enumerate(minutes):
        x = index * (BAR + GAP)
        if not activity.covered(minute):
            unread.append(x)
        base = float(HEIGHT)
        for outcome in OUTCOMES:
            count = minute.counts[outcome]
            if not count:
                continue
            height = count * scale
            base -= height
            when = minute.start.strftime("%H:%M")
            segments.append(Segment(outcome, x, base, height, f"{when}: {count:,} {outcome}"))
    return Chart(
        width=len(minutes) * (BAR + GAP),
        height=HEIGHT,
        segments=segments,
        unread=unread,
        peak=peak,
        first=minutes[0].start,
        last=minutes[-1].start,
        total=sum(minute.total for minute in minutes),
    )
