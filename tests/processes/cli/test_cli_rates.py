"""Rate limits from the command line: ``queues rates`` shows each limit the app sets, with
the next start a claim would get, the runs that could start at once and the starts
reserved ahead; ``--key`` adds a per-key limit's scope (a key with markup is printed, not
read as markup; a key with control characters is refused); errors are the other
commands' errors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runlane_sqs import Runlane
from runlane_sqs.core.rates import key_rate_scope, queue_rate_scope, to_epoch_us
from tests.processes.cli.apps.rates_app import APP_SPEC, PARTNER, PARTNER_LIMIT, TASK, build
from tests.processes.cli.conftest import Cli

EXIT_APP_NOT_IMPORTABLE = 3
EXIT_USAGE = 2
NO_APP = "RUNLANE_APP"
PARTNER_SCOPE = queue_rate_scope(PARTNER)
MARKUP_KEY = "[bold red]acme[/]"
AHEAD = timedelta(seconds=60)
"""The reservations are made this far ahead, so the figures hold however long the
command takes to start."""


@pytest.fixture
def app(provisioned: dict[str, str]) -> Runlane:
    built = build()
    built.provision()
    return built


@pytest.fixture
def app_cli(cli: Cli, app: Runlane) -> Cli:
    runner = Cli({**cli.env, NO_APP: APP_SPEC}, cli.log_dir)
    runner.started = cli.started
    return runner


def test_each_limit_shows_its_next_start_and_its_reservations(app: Runlane, app_cli: Cli) -> None:
    rate = PARTNER_LIMIT.rate_in(PARTNER_SCOPE)
    first = app.clock.now() + AHEAD
    for _ in range(3):  # claims reserved three starts, the first a minute from now
        app.engine.store.rates.reserve(rate, cost=1, not_before_us=to_epoch_us(first))

    listed, table = app_cli.many(
        [("queues", "rates", "--json", "--key", MARKUP_KEY), ("queues", "rates", "--key", "acme")]
    )

    states = {s["scope"]: s for s in listed.json()}
    assert set(states) == {PARTNER_SCOPE, key_rate_scope(TASK, 1_000_000, MARKUP_KEY)}
    partner = states[PARTNER_SCOPE]
    next_start = first + 2 * timedelta(microseconds=rate.interval_us)  # tat less the burst
    assert partner["next_start"] == next_start.isoformat()
    assert (partner["available"], partner["rate"], partner["burst"]) == (0, 5, 1)
    assert partner["reserved_ahead"] >= 3 and partner["stored_matches"] is True
    keyed = states[key_rate_scope(TASK, 1_000_000, MARKUP_KEY)]
    assert (keyed["next_start"], keyed["available"], keyed["reserved_ahead"]) == (None, 1, 0)
    assert table.code == 0, table.stderr
    assert "5/1s +1" in table.stdout and "2/1s" in table.stdout
    assert key_rate_scope(TASK, 1_000_000, "acme") in table.stdout


def test_a_key_with_markup_is_printed_and_one_with_controls_refused(
    app: Runlane, app_cli: Cli
) -> None:
    shown, refused = app_cli.many(
        [("queues", "rates", "--key", MARKUP_KEY), ("queues", "rates", "--key", "a\x07b")]
    )

    assert shown.code == 0, shown.stderr
    assert MARKUP_KEY in shown.stdout  # printed as written, never read as markup
    assert refused.code != 0 and "Traceback" not in refused.stderr
    assert refused.stdout == ""


def test_the_command_needs_the_app(cli: Cli) -> None:
    done = cli.without(NO_APP)("queues", "rates")
    assert done.code == EXIT_APP_NOT_IMPORTABLE, done.stderr
    assert "rate limits are set by the app's code" in done.stderr
    assert "Traceback" not in done.stderr
