"""Schedules: when a task should run by itself (once, every interval, or on a cron
expression in a time zone). Pure definitions and occurrence arithmetic, no I/O.

An occurrence is identified by its schedule and its scheduled time; maintenance turns
each one into exactly one run (docs/concepts.md, "Schedules"). Times are whole
milliseconds in UTC, as storage keeps them. Cron expressions in a time zone are read in
:mod:`runlane_sqs.core.cron`: a daily time that a zone skips fires once, at the first
valid time after it; one that a zone repeats fires once, at its first instance.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.clock import (
    EPOCH,
    ONE_MS,
    Duration,
    from_epoch_ms,
    to_epoch_ms,
    to_timedelta,
    truncate_ms,
)
from runlane_sqs.core.cron import check_cron, next_cron_time, shortest_gap, zone_named
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.model import JSON
from runlane_sqs.core.names import check_queue
from runlane_sqs.core.tags import check_tags
from runlane_sqs.core.values import Sealed

SCHEDULE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def check_schedule_id(value: object) -> str:
    """Schedule ids end up in storage keys and run records: letters, digits and ``.:-_``."""
    if not isinstance(value, str) or not SCHEDULE_ID_PATTERN.fullmatch(value):
        raise ConfigurationError(
            f"schedule id {value!r} must match {SCHEDULE_ID_PATTERN.pattern} (letters, digits, "
            "'.', ':', '-' and '_', at most 128 characters)"
        )
    return value


class ScheduleKind(StrEnum):
    """How a schedule's occurrences are spaced."""

    CRON = "cron"
    """On a five-field cron expression, read in the schedule's time zone."""
    EVERY = "every"
    """Every fixed interval, counted from ``start_at`` (or the Unix epoch)."""
    ONCE = "once"
    """One occurrence at a fixed time."""


class CatchUp(StrEnum):
    """What maintenance does with occurrences it finds already past (after downtime, or
    when a paused schedule is resumed)."""

    LATEST = "latest"
    """Create the most recent missed occurrence only (the default)."""
    ALL = "all"
    """Create every missed occurrence, a bounded number per maintenance pass."""
    SKIP = "skip"
    """Create none of them; go on from the next occurrence."""


def _aware(value: object, what: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ConfigurationError(f"{what} must be a datetime with a time zone, not {value!r}")
    return truncate_ms(value.astimezone(UTC))


@dataclass(frozen=True)
class Schedule:
    """One schedule of a task. Build it with :meth:`cron`, :meth:`every` or :meth:`once`
    and pass it in the task's ``schedules``; everything is checked here, before anything
    is written."""

    id: str
    kind: ScheduleKind
    expression: str | None = None
    """The cron expression (``cron``)."""
    interval: timedelta | None = None
    """Time between occurrences (``every``)."""
    at: datetime | None = None
    """The one occurrence (``once``)."""
    tz: str = "UTC"
    """The IANA time zone a cron expression is read in."""
    payload: JSON = None
    """The payload of its runs. A schedule read from storage where the app's codecs
    encoded it carries a :class:`~runlane_sqs.core.values.Sealed` here, opened by the
    engine where it is used."""
    queue: str | None = None
    """The queue of its runs (default: the task's)."""
    catch_up: CatchUp = CatchUp.LATEST
    jitter: timedelta = timedelta(0)
    """Each run is due up to this much after its occurrence (the same offset every time
    for one occurrence), so schedules sharing a time do not start at one instant."""
    start_at: datetime | None = None
    """No occurrence before this; an interval counts from it."""
    end_at: datetime | None = None
    """No occurrence after this."""
    tags: dict[str, str] = field(default_factory=dict, hash=False)
    """The tags of its runs (docs/tags.md)."""
    task: str | None = field(default=None, compare=True)
    """The task it triggers (set when the task is registered)."""

    def __post_init__(self) -> None:
        check_schedule_id(self.id)
        zone = zone_named(self.tz)
        object.__setattr__(self, "kind", ScheduleKind(self.kind))
        object.__setattr__(self, "catch_up", _catch_up(self.catch_up))
        if self.kind is ScheduleKind.CRON:
            check_cron(self.expression, zone)
        elif self.kind is ScheduleKind.EVERY:
            interval = to_timedelta(self.interval, "interval")  # type: ignore[arg-type]
            if interval < timedelta(seconds=1) or interval % timedelta(seconds=1):
                raise ConfigurationError(
                    f"schedule {self.id!r}: interval must be a whole number of seconds, at "
                    f"least 1, not {self.interval!r}"
                )
            object.__setattr__(self, "interval", interval)
        else:
            object.__setattr__(self, "at", _aware(self.at, f"schedule {self.id!r}: at"))
        jitter = to_timedelta(self.jitter, "jitter")
        object.__setattr__(self, "jitter", truncate_ms(EPOCH + jitter) - EPOCH)
        for name in ("start_at", "end_at"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _aware(value, f"schedule {self.id!r}: {name}"))
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ConfigurationError(f"schedule {self.id!r}: end_at must be after start_at")
        if self.queue is not None:
            check_queue(self.queue)
        if self.tags:
            object.__setattr__(self, "tags", check_tags(self.tags))

    # builders -----------------------------------------------------------------------

    @classmethod
    def cron(
        cls,
        id: str,
        expression: str,
        *,
        tz: str = "UTC",
        payload: JSON = None,
        queue: str | None = None,
        catch_up: CatchUp | str = CatchUp.LATEST,
        jitter: Duration = 0,
        tags: Mapping[str, str] | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
    ) -> Schedule:
        """Occurrences on a five-field cron expression (``"0 9 * * mon-fri"``) in ``tz``."""
        return cls(
            id=id,
            kind=ScheduleKind.CRON,
            expression=expression,
            tz=tz,
            payload=payload,
            queue=queue,
            catch_up=_catch_up(catch_up),
            jitter=to_timedelta(jitter, "jitter"),
            tags=dict(tags or {}),
            start_at=start_at,
            end_at=end_at,
        )

    @classmethod
    def every(
        cls,
        id: str,
        interval: Duration,
        *,
        payload: JSON = None,
        queue: str | None = None,
        catch_up: CatchUp | str = CatchUp.LATEST,
        jitter: Duration = 0,
        tags: Mapping[str, str] | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
    ) -> Schedule:
        """An occurrence every ``interval``, on a fixed grid counted from ``start_at`` (or
        the Unix epoch: ``every(timedelta(hours=1))`` fires on the hour, in UTC)."""
        return cls(
            id=id,
            kind=ScheduleKind.EVERY,
            interval=to_timedelta(interval, "interval"),
            payload=payload,
            queue=queue,
            catch_up=_catch_up(catch_up),
            jitter=to_timedelta(jitter, "jitter"),
            tags=dict(tags or {}),
            start_at=start_at,
            end_at=end_at,
        )

    @classmethod
    def once(
        cls,
        id: str,
        at: datetime,
        *,
        payload: JSON = None,
        queue: str | None = None,
        catch_up: CatchUp | str = CatchUp.LATEST,
        jitter: Duration = 0,
        tags: Mapping[str, str] | None = None,
    ) -> Schedule:
        """One occurrence at ``at`` (a datetime with a time zone)."""
        return cls(
            id=id,
            kind=ScheduleKind.ONCE,
            at=at,
            payload=payload,
            queue=queue,
            catch_up=_catch_up(catch_up),
            jitter=to_timedelta(jitter, "jitter"),
            tags=dict(tags or {}),
        )

    def for_task(self, task: str, queue: str) -> Schedule:
        """This schedule bound to the task that registers it (its queue by default)."""
        return replace(self, task=task, queue=self.queue or queue)

    # occurrences --------------------------------------------------------------------

    def fires_more_often_than(self, period: timedelta) -> timedelta | None:
        """The shortest gap between occurrences when it is below ``period`` (else
        ``None``). A cron expression never fires more than once a minute."""
        if self.kind is ScheduleKind.CRON and period <= timedelta(minutes=1):
            return None
        gap = self.shortest_gap
        return gap if gap is not None and gap < period else None

    @property
    def shortest_gap(self) -> timedelta | None:
        """The shortest time between two occurrences (``None`` for ``once``): the
        interval, or for cron the shortest gap :func:`~runlane_sqs.core.cron.shortest_gap`
        finds."""
        if self.kind is ScheduleKind.EVERY:
            return self.interval
        if self.kind is ScheduleKind.ONCE:
            return None
        assert self.expression is not None
        return shortest_gap(self.expression, self.tz)

    def next_after(self, moment: datetime) -> datetime | None:
        """The first occurrence strictly after ``moment`` (``None``: there is none)."""
        at = self._raw_after(max(moment, self.start_at - ONE_MS) if self.start_at else moment)
        if at is None or (self.end_at is not None and at > self.end_at):
            return None
        return at

    def latest_until(self, moment: datetime) -> datetime | None:
        """The last occurrence at or before ``moment`` (``None``: there is none)."""
        if self.end_at is not None:
            moment = min(moment, self.end_at)
        at = self._raw_before(moment + ONE_MS)
        if at is None or (self.start_at is not None and at < self.start_at):
            return None
        return at

    def occurrences(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Occurrences strictly after ``after`` and at or before ``until``, in order."""
        at = self.next_after(after)
        while at is not None and at <= until:
            yield at
            at = self.next_after(at)

    def jitter_of(self, occurrence: datetime) -> timedelta:
        """The delay of the run of one occurrence: the same in every process."""
        if not self.jitter:
            return timedelta(0)
        digest = hashlib.blake2b(f"{self.id}#{to_epoch_ms(occurrence)}".encode(), digest_size=8)
        return ONE_MS * (int.from_bytes(digest.digest()) % (self.jitter // ONE_MS))

    def _raw_after(self, moment: datetime) -> datetime | None:
        if self.kind is ScheduleKind.ONCE:
            assert self.at is not None
            return self.at if self.at > moment else None
        if self.kind is ScheduleKind.EVERY:
            assert self.interval is not None
            anchor = self.start_at or EPOCH
            if moment < anchor:
                return anchor
            intervals = (moment - anchor) // self.interval + 1
            return anchor + intervals * self.interval
        assert self.expression is not None
        return next_cron_time(self.expression, self.tz, moment, reverse=False)

    def _raw_before(self, moment: datetime) -> datetime | None:
        """The last occurrence strictly before ``moment``."""
        if self.kind is ScheduleKind.ONCE:
            assert self.at is not None
            return self.at if self.at < moment else None
        if self.kind is ScheduleKind.EVERY:
            assert self.interval is not None
            anchor = self.start_at or EPOCH
            if moment <= anchor:
                return None
            intervals = (moment - anchor - ONE_MS) // self.interval
            return anchor + intervals * self.interval
        assert self.expression is not None
        return next_cron_time(self.expression, self.tz, moment, reverse=True)

    # storage ------------------------------------------------------------------------

    def to_json(self) -> dict[str, JSON]:
        """The definition as stored beside the schedule's state (operators read it)."""
        data: dict[str, JSON] = {
            "id": self.id,
            "kind": self.kind.value,
            "task": self.task,
            "queue": self.queue,
            "tz": self.tz,
            "catch_up": self.catch_up.value,
            "jitter_ms": self.jitter // ONE_MS,
        }
        if isinstance(self.payload, Sealed):
            data["sealed_payload"] = self.payload.text
        else:
            data["payload"] = self.payload
        if self.tags:  # absent without tags: a schedule's fingerprint is as it was
            data["tags"] = dict(self.tags)
        if self.expression is not None:
            data["expression"] = self.expression
        if self.interval is not None:
            data["interval_ms"] = self.interval // ONE_MS
        for name in ("at", "start_at", "end_at"):
            value = getattr(self, name)
            if value is not None:
                data[name] = to_epoch_ms(value)
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Schedule:
        def when(name: str) -> datetime | None:
            value = data.get(name)
            return from_epoch_ms(int(value)) if value is not None else None

        interval = data.get("interval_ms")
        sealed = data.get("sealed_payload")
        return cls(
            id=data["id"],
            kind=ScheduleKind(data["kind"]),
            expression=data.get("expression"),
            interval=ONE_MS * int(interval) if interval is not None else None,
            at=when("at"),
            tz=data.get("tz", "UTC"),
            payload=Sealed.parse(sealed) if sealed is not None else data.get("payload"),
            queue=data.get("queue"),
            catch_up=CatchUp(data.get("catch_up", CatchUp.LATEST.value)),
            jitter=ONE_MS * int(data.get("jitter_ms", 0)),
            start_at=when("start_at"),
            end_at=when("end_at"),
            tags=dict(data.get("tags") or {}),
            task=data.get("task"),
        )

    @property
    def fingerprint(self) -> str:
        """Changes whenever the definition does (the engine compares a stored schedule's,
        with its payload opened, to notice a changed schedule)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()

    def describe(self) -> str:
        """One line for people: ``cron 0 9 * * * (Europe/Paris)``, ``every 1:00:00``..."""
        if self.kind is ScheduleKind.CRON:
            return f"cron {self.expression} ({self.tz})"
        if self.kind is ScheduleKind.EVERY:
            return f"every {self.interval}"
        assert self.at is not None
        return f"once at {self.at.isoformat()}"


def occurrence_run_id(environment: str, schedule_id: str, occurrence: datetime) -> str:
    """The run id of one occurrence: the same in every process, so the run's creation
    (conditioned on no run having that id) is the one write that claims the occurrence.
    Hex like a random run id, spread as evenly over the index shards."""
    text = f"{environment}#{schedule_id}#{to_epoch_ms(occurrence)}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _catch_up(value: object) -> CatchUp:
    try:
        return CatchUp(value)  # type: ignore[arg-type]
    except ValueError:
        choices = ", ".join(c.value for c in CatchUp)
        raise ConfigurationError(f"catch_up must be one of {choices}, not {value!r}") from None
