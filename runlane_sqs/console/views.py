"""What the console's pages show, built from the operator API's values: pure functions,
no I/O. Filters arrive as query parameters and are checked here, so a bad one is a
message on the page, never an error page; payloads are shown as indented JSON, or not
at all with ``--hide-payloads``. Jinja2 escapes every value the templates print."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from runlane_sqs.core.attempts import Attempt
from runlane_sqs.core.errors import InvalidKeyError
from runlane_sqs.core.groups import Group
from runlane_sqs.core.model import JSON, EventType, Run, RunEvent, RunStatus
from runlane_sqs.core.names import QUEUE_PATTERN, TASK_PATTERN
from runlane_sqs.core.schedules import SCHEDULE_ID_PATTERN
from runlane_sqs.core.tags import MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, parse_tags
from runlane_sqs.core.telemetry import trace_id_of

MAX_REASON_CHARS = 500
MAX_ACTOR_CHARS = 100
HIDDEN = "(hidden: the console runs with --hide-payloads)"
PAGE_SIZES = (25, 50, 100)
MAX_FILTER_CHARS = 200
MAX_TAG_FILTER_CHARS = MAX_TAG_KEY_CHARS + 1 + MAX_TAG_VALUE_CHARS
NAME_PATTERNS = {"task": TASK_PATTERN, "queue": QUEUE_PATTERN, "schedule": SCHEDULE_ID_PATTERN}
ACTION_STATUSES: Mapping[str, frozenset[RunStatus]] = {
    "cancel": frozenset(s for s in RunStatus if not s.is_terminal),
    "retry": frozenset({RunStatus.FAILED}),
    "rerun": frozenset(s for s in RunStatus if s.is_terminal),
    "retry-failed": frozenset({RunStatus.FAILED}),
    "unpark": frozenset({RunStatus.PARKED}),
}
"""The statuses in which each action is offered (the API decides; the page only hides
buttons that would be refused). ``retry-failed`` only for a parent that opened a group."""
GROUP_ACTIONS = frozenset({"retry-failed"})
"""Actions offered only on the page of a run that opened a group."""
MARKED_EVENTS = frozenset(
    {
        EventType.LEASE_EXPIRED,
        EventType.ATTEMPT_TIMED_OUT,
        EventType.ATTEMPT_FAILED,
        EventType.CANCEL_REQUESTED,
        EventType.LINKED_RUN,
        EventType.PARKED,
    }
)


class Problem(Exception):
    """A request the console refuses, with the HTTP status and the words to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class RunFilters:
    """The runs page's filters, as checked; ``errors`` says what was refused."""

    statuses: list[RunStatus] = field(default_factory=list)
    task: str | None = None
    queue: str | None = None
    schedule: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    tags: dict[str, str] = field(default_factory=dict)
    """Only runs with every one of these tags (``tag=key=value``, repeatable)."""
    limit: int = PAGE_SIZES[0]
    cursor: str | None = None
    errors: list[str] = field(default_factory=list)

    def query(self) -> dict[str, object]:
        """Keyword arguments of ``app.runs.list``."""
        return {
            "status": self.statuses or None,
            "task": self.task,
            "queue": self.queue,
            "schedule": self.schedule,
            "created_after": self.created_after,
            "created_before": self.created_before,
            "tags": self.tags or None,
            "limit": self.limit,
            "cursor": self.cursor,
        }


def parse_filters(
    params: Mapping[str, str], statuses: Sequence[str], tags: Sequence[str] = ()
) -> RunFilters:
    """The filters of a query string (``status`` and ``tag`` may repeat: ``statuses``,
    ``tags``)."""
    filters = RunFilters()
    _parse_tags(filters, [text.strip() for text in tags if text.strip()])
    for value in filter(None, statuses):
        try:
            filters.statuses.append(RunStatus(value))
        except ValueError:
            filters.errors.append(f"unknown status {shown(value)!r}")
    for name, pattern in NAME_PATTERNS.items():
        text = params.get(name, "").strip()
        if text and (len(text) > MAX_FILTER_CHARS or not pattern.fullmatch(text)):
            filters.errors.append(f"{name} {shown(text)!r} is not a valid {name} name")
        elif text:
            setattr(filters, name, text)
    for name in ("created_after", "created_before"):
        _parse_time(filters, name, params.get(name, "").strip())
    size = params.get("limit", "")
    if size and not (size.isdigit() and int(size) in PAGE_SIZES):
        filters.errors.append(f"page size must be one of {', '.join(map(str, PAGE_SIZES))}")
    elif size:
        filters.limit = int(size)
    filters.cursor = params.get("cursor") or None
    return filters


def _parse_tags(filters: RunFilters, texts: list[str]) -> None:
    if any(len(text) > MAX_TAG_FILTER_CHARS for text in texts):
        filters.errors.append(f"a tag filter is at most {MAX_TAG_FILTER_CHARS} characters")
        return
    try:
        filters.tags = parse_tags(texts)
    except InvalidKeyError as exc:
        filters.errors.append(str(exc))


def _parse_time(filters: RunFilters, name: str, text: str) -> None:
    if not text:
        return
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        filters.errors.append(f"{name} {shown(text)!r} is not a date and time")
        return
    if moment.tzinfo is None:
        filters.errors.append(f"{name} needs a UTC offset, e.g. {shown(text)}+00:00")
        return
    setattr(filters, name, moment)


def shown(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, for a message about it."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: JSON, hide: bool) -> str:
    """A payload or result as indented JSON (escaped by the template)."""
    if hide:
        return HIDDEN
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline: its start and end as a share of the run's span."""

    number: int
    left: float
    width: float
    outcome: str
    worker: str | None
    started_at: datetime
    ended_at: datetime | None


@dataclass(frozen=True)
class Mark:
    """An event the timeline marks (a lease expiry, a retry, a cancellation)."""

    left: float
    label: str
    at: datetime


def timeline(
    run: Run, attempts: Sequence[Attempt], events: Sequence[RunEvent], now: datetime
) -> tuple[list[Bar], list[Mark]]:
    """The run's attempts as bars and its marked events, from its creation to its last
    change (or now, while it is unfinished); the gaps between bars are its waits."""
    start = run.created_at
    end = run.updated_at if run.is_terminal else max(now, run.updated_at)
    span = max((end - start).total_seconds(), 1e-3)

    def share(moment: datetime) -> float:
        return round(min(max((moment - start).total_seconds() / span, 0.0), 1.0) * 100, 3)

    bars = [
        Bar(
            a.number,
            share(a.started_at),
            max(share(a.ended_at or end) - share(a.started_at), 0.5),
            a.outcome or "running",
            a.worker,
            a.started_at,
            a.ended_at,
        )
        for a in attempts
    ]
    marks = [Mark(share(e.at), e.type.value, e.at) for e in events if e.type in MARKED_EVENTS]
    return bars, marks


LIVE_SECONDS = 2
"""How often a run page of an unfinished run (or of a parent whose group is unfinished)
reads itself again to update its status, progress, state and children without a reload
(``console.js``): one page read, as a reload, but the page stays where it is."""


def live_seconds(run: Run, groups: Sequence[Group]) -> int | None:
    """Seconds between the page's updates while ``run`` or one of its groups is
    unfinished; ``None`` once nothing on it changes any more."""
    if not run.is_terminal or any(group.joined_at is None for group in groups):
        return LIVE_SECONDS
    return None


def trace_of(run: Run) -> str | None:
    """The run's trace id, for finding it in a tracing backend."""
    return trace_id_of(run.trace)


def actions_for(run: Run, read_only: bool, has_groups: bool = False) -> list[str]:
    """The actions the run page offers for ``run`` (``has_groups``: it opened a group)."""
    if read_only:
        return []
    return [
        name
        for name, allowed in ACTION_STATUSES.items()
        if run.status in allowed and (has_groups or name not in GROUP_ACTIONS)
    ]


def checked_actor(form: Mapping[str, str]) -> tuple[str, str]:
    """The actor's name and the reason an action form gives; a problem if either is
    missing or too long, or holds characters that do not print (a reason may hold line
    breaks and tabs)."""
    reason, actor = form.get("reason", "").strip(), form.get("actor", "").strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise Problem(400, f"Give a reason (1 to {MAX_REASON_CHARS} characters).")
    if not all(char.isprintable() or char in "\n\t" for char in reason):
        raise Problem(400, "The reason holds characters that do not print.")
    if not actor or len(actor) > MAX_ACTOR_CHARS or not actor.isprintable():
        raise Problem(400, f"Give your name (1 to {MAX_ACTOR_CHARS} printable characters).")
    return actor, reason


TRIGGER_OUTCOMES = {
    "triggered": "Run triggered.",
    "joined": (
        "The trigger went to this run, which was there before (its idempotency key, or a "
        "debounce or batch it joined): no new run was created."
    ),
}
"""What a run's page says after a trigger from a task's page (``done``)."""


def done_message(done: str | None) -> str | None:
    """What a page's ``done`` parameter says after a redirect, if it names an action or a
    trigger's outcome (any other text is not shown: a crafted link cannot put words on
    the page)."""
    if done in ACTION_STATUSES:
        return f"{done} recorded."
    return TRIGGER_OUTCOMES.get(done or "")
