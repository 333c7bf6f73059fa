"""The pure parts of health reads: bounded counts in words, the activity of a window
from group tallies (what a bounded read covers), and the dead-letter target read from a
queue's redrive policy, whatever the policy holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.adapters.sqs.transport import dead_letter_target
from runlane_sqs.core.health import GROUPS, Count, GroupTally, activity

NOW = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
SINCE = NOW - timedelta(hours=1)


def tallies(**created: list[datetime]) -> list[GroupTally]:
    return [GroupTally(group, tuple(created.get(group, [])), None) for group in GROUPS]


def test_counts_read_as_words() -> None:
    assert str(Count(1234)) == "1,234"
    assert str(Count(100, more=True)) == "100+"


def test_a_run_lands_in_the_minute_it_was_created() -> None:
    seen = activity(tallies(failed=[NOW - timedelta(seconds=45), NOW]), SINCE, NOW)

    assert seen.minutes[-1].start == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert seen.minutes[-1].counts["failed"] == 1
    assert seen.minutes[-2].counts["failed"] == 1
    assert seen.counts["failed"] == 2 and seen.complete
    assert all(seen.covered(minute) for minute in seen.minutes)  # nothing to shade


def test_runs_outside_the_window_are_not_counted() -> None:
    seen = activity(
        tallies(succeeded=[SINCE - timedelta(seconds=1), NOW + timedelta(seconds=1)]),
        SINCE,
        NOW,
    )
    assert seen.counts["succeeded"] == 0
    assert sum(m.total for m in seen.minutes) == 0


def test_the_window_shrinks_to_what_every_group_covers() -> None:
    cut = NOW - timedelta(minutes=10)
    groups = tallies(failed=[NOW - timedelta(minutes=20), NOW - timedelta(minutes=5)])
    groups = [GroupTally(t.group, t.created, cut) if t.group == "succeeded" else t for t in groups]

    seen = activity(groups, SINCE, NOW)

    assert seen.covered_from == cut and not seen.complete
    assert seen.counts["failed"] == 1  # the one 20 minutes ago lies outside the cover


def test_every_group_needs_a_tally() -> None:
    with pytest.raises(ValueError, match="no tally"):
        activity(tallies()[:-1], SINCE, NOW)


@pytest.mark.parametrize(
    ("policy", "target"),
    [
        (
            '{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:jobs-dlq"}',
            ("jobs-dlq", "123456789012"),
        ),
        (None, None),
        ("", None),
        ("not json", None),
        ("[1, 2]", None),
        ('{"deadLetterTargetArn": 7}', None),
        ('{"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123:"}', None),
        ('{"deadLetterTargetArn": "<script>alert(1)</script>"}', None),
        ('{"maxReceiveCount": "5"}', None),
    ],
)
def test_the_dead_letter_target_is_read_from_the_redrive_policy(
    policy: str | None, target: tuple[str, str] | None
) -> None:
    assert dead_letter_target(policy) == target
