"""Rate limits as tasks and queues declare them: which limits a run's claim applies, and
definitions refused before anything is kept."""

from __future__ import annotations

from typing import Any

import pytest

from runlane_sqs import ConfigurationError, RateLimit
from runlane_sqs.core.rates import key_rate_scope, queue_rate_scope, task_rate_scope
from runlane_sqs.testing import in_memory_app

SECOND_US = 1_000_000


def _sync(ctx: Any, payload: Any) -> Any:
    return payload


def test_a_claim_applies_the_queue_task_and_key_limits_of_its_run() -> None:
    app = in_memory_app()
    partner = app.queue("partner", rate_limit=RateLimit(100))
    app.task(
        _sync,
        name="crm.sync",
        queue=partner,
        concurrency_key=lambda p: p["tenant"],
        rate_limits=[RateLimit(20, burst=5), RateLimit(2, per_key=True)],
        rate_cost=2,
    )
    run = app.trigger("crm.sync", {"tenant": "acme"})

    rates = app.tasks.rates_for(app.runs.get(run.id))

    # spaced (per + grace) / rate apart, the grace 50 ms for a limit per second
    assert [(r.scope, r.interval_us, r.tolerance_us, r.grace_us) for r in rates] == [
        (queue_rate_scope("partner"), 10_500, 0, 50_000),
        (task_rate_scope("crm.sync", SECOND_US), 52_500, 262_500, 50_000),
        (key_rate_scope("crm.sync", SECOND_US, "acme"), 525_000, 0, 50_000),
    ]
    assert app.tasks.get("crm.sync").rate_cost == 2  # type: ignore[union-attr]
    assert app.tasks.limited(app.tasks.resolve("crm.sync"), "partner")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limits": RateLimit(1)}, "must be a list of RateLimit"),
        ({"rate_limits": [10]}, "must be RateLimit values"),
        ({"rate_limits": [RateLimit(1), RateLimit(5)]}, "two rate limits per 0:00:01"),
        ({"rate_limits": [RateLimit(1, per_key=True)] * 2}, "per key"),
        ({"rate_cost": 0}, "cost is from 1"),
        ({"concurrency_key": lambda p: "k"}, "needs a key_limit or a per_key rate limit"),
    ],
)
def test_bad_rate_limits_are_refused(options: dict[str, Any], message: str) -> None:
    app = in_memory_app()
    with pytest.raises(ConfigurationError, match=message):
        app.task(_sync, name="bad.sync", **options)
    assert app.tasks.get("bad.sync") is None


def test_a_queue_rate_limit_is_not_per_key_and_is_defined_once() -> None:
    app = in_memory_app()
    with pytest.raises(ConfigurationError, match="without per_key"):
        app.queue("q", rate_limit=RateLimit(5, per_key=True))
    app.queue("q", rate_limit=RateLimit(5))
    with pytest.raises(ConfigurationError, match="already defined"):
        app.queue("q", rate_limit=RateLimit(6))
