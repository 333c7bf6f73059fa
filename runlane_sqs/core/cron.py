"""Cron expressions in a time zone: checking them and finding their times.

Expressions are read by ``cronsim``, which treats daylight-saving changes as Debian's
cron does (docs/concepts.md, "Cron in a time zone"); zones are the standard library's
``zoneinfo``. Times come in and go out as UTC, to the millisecond, as storage keeps them.
Both are imported by the functions that use them, so an app without schedules (a Lambda
consumer, say) never loads them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from typing import TYPE_CHECKING

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import ConfigurationError

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

MAX_CRON_CHARS = 256
"""Longest cron expression accepted."""
CRON_FIELDS = 5
"""Minute, hour, day of month, month, day of week (no seconds: maintenance creates the
runs, at most once a minute by default)."""
MAX_ZONE_CHARS = 64
GAP_SAMPLE = 100
"""Times of an expression looked at, from each start, to find its shortest gap."""
SAMPLE_START = datetime(2026, 1, 1)
"""Where the gap samples start: the new year, and the day before each change of the
zone's offset in that year (a clock going back can bring two times closer)."""
SAMPLE_DAYS = 366


def zone_named(name: object) -> ZoneInfo:
    """The IANA time zone ``name``; a clear error for anything else."""
    if not isinstance(name, str) or not name or len(name) > MAX_ZONE_CHARS:
        raise ConfigurationError(f"time zone must be an IANA zone name, not {name!r}")
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415 (schedules only)

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"unknown time zone {name!r}") from exc


def check_cron(expression: object, zone: ZoneInfo) -> str:
    """A five-field expression cronsim reads; a clear error otherwise."""
    if not isinstance(expression, str) or len(expression) > MAX_CRON_CHARS:
        raise ConfigurationError(f"cron expression must be a string, not {expression!r}")
    if len(expression.split()) != CRON_FIELDS:
        raise ConfigurationError(
            f"invalid cron expression {expression!r}: it needs five fields (minute, hour, "
            "day of month, month, day of week)"
        )
    from cronsim import CronSim, CronSimError  # noqa: PLC0415 (schedules only)

    try:
        CronSim(expression, SAMPLE_START.replace(tzinfo=zone))
    except CronSimError as exc:
        raise ConfigurationError(f"invalid cron expression {expression!r}: {exc}") from exc
    return expression


def next_cron_time(expression: str, tz: str, moment: datetime, *, reverse: bool) -> datetime | None:
    """The expression's first time strictly after ``moment`` (before it with
    ``reverse``), or ``None`` if it never matches (e.g. 30 February)."""
    from zoneinfo import ZoneInfo  # noqa: PLC0415 (schedules only)

    from cronsim import CronSim  # noqa: PLC0415 (schedules only)

    local = moment.astimezone(ZoneInfo(tz))
    try:
        found = next(iter(CronSim(expression, local, reverse=reverse)))
    except StopIteration:
        return None
    return truncate_ms(found.astimezone(UTC))


def shortest_gap(expression: str, tz: str) -> timedelta | None:
    """The shortest time between two of the expression's times: of ``GAP_SAMPLE`` times
    from the new year, which hold every minute list of its first matching hours, and
    from the day before each offset change of the zone that year."""
    from zoneinfo import ZoneInfo  # noqa: PLC0415 (schedules only)

    from cronsim import CronSim  # noqa: PLC0415 (schedules only)

    zone = ZoneInfo(tz)
    gaps: list[timedelta] = []
    for start in [SAMPLE_START.replace(tzinfo=zone), *_offset_changes(zone)]:
        sample = list(islice(CronSim(expression, start), GAP_SAMPLE))
        gaps.extend(b.astimezone(UTC) - a.astimezone(UTC) for a, b in pairwise(sample))
    return min(gaps, default=None)


def _offset_changes(zone: ZoneInfo) -> list[datetime]:
    """Local midnight of each day after which the zone's UTC offset changes."""
    days = [(SAMPLE_START + timedelta(days=n)).replace(tzinfo=zone) for n in range(SAMPLE_DAYS)]
    return [day for day, after in pairwise(days) if day.utcoffset() != after.utcoffset()]
