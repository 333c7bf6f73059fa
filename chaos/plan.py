"""How much of each fault a chaos run injects, and when (seconds into the trigger
phase). ``python -m chaos`` (1,000 runs) and ``--smoke`` (60 runs) differ only here."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.app import FAIL_ONCE, PLAIN, RELEASE, SLEEP

ORDERING_KEYS = 3
TENANTS = 3


@dataclass(frozen=True)
class Plan:
    runs: int
    seed: int
    trigger_seconds: float
    """Runs are triggered at an even pace over this long."""
    kills: int = 5
    zombie: bool = True
    zombie_leases: float = 2.5
    """How long the frozen worker stays stopped, in lease durations."""
    steady_error_rate: float = 0.05
    burst_error_rate: float = 0.30
    burst_seconds: float = 15.0
    drop_rate: float = 0.01
    sqs_error_rate: float = 0.03
    """Share of SQS requests (sends, receives, deletes) answered with an error."""
    lost_send_rate: float = 0.02
    """Share of sends whose message is queued but whose response is lost."""
    double_send_rate: float = 0.05
    """Share of sends the queue holds twice."""
    late_delete_rate: float = 0.02
    """Share of deletes that land only after the visibility timeout."""
    duplicate_share: float = 0.20
    forged_share: float = 0.05
    duplicate_delay_seconds: float = 10.0
    """A duplicate goes out up to this long after its run's trigger (before, during or
    after its execution)."""
    purge: bool = True
    restart: bool = True
    drain_leases: float = 12.0
    """After the trigger phase and the last fault, every run must be terminal within
    this many lease durations, or it counts as stuck."""
    mix: tuple[tuple[str, float], ...] = (
        (PLAIN, 0.70),
        (FAIL_ONCE, 0.10),
        (RELEASE, 0.10),
        (SLEEP, 0.10),
    )
    """The kinds of single runs and of the children of fan-outs."""
    ordered_share: float = 0.10
    """Single runs triggered with one of :data:`ORDERING_KEYS` ordering keys."""
    keyed_share: float = 0.10
    """Single runs of the task with a per-tenant concurrency limit, over :data:`TENANTS`."""
    rated_share: float = 0.10
    """Single runs of the rate-limited task."""
    map_share: float = 0.10
    """Triggers that are parents: ``ctx.map`` over a few children, then their sum."""
    then_share: float = 0.05
    """Triggers that are ``app.group(children, then=callback)`` instead of a run."""
    fan_out_items: tuple[int, int] = (3, 5)
    """Children of one fan-out: at least, at most."""
    fan_out_window: int = 2
    """``max_in_flight`` of every fan-out: below its item count, so the window slides."""

    def timeline(self) -> list[tuple[float, str]]:
        """(seconds into the trigger phase, action), in order. The freeze, the burst, the
        restart and the purge come first; the kills are spread over the last half, apart
        from them, so each kill's recovery time is its own."""
        span = self.trigger_seconds
        events = [(span * 0.12, "burst")]
        if self.zombie:
            events.append((span * 0.05, "freeze"))
        if self.restart:
            events.append((span * 0.25, "restart"))
        if self.purge:
            events.append((span * 0.40, "purge"))
        spacing = 0.40 / max(1, self.kills - 1)
        events += [(span * (0.55 + k * spacing), "kill") for k in range(self.kills)]
        return sorted(events)


def full(runs: int = 1000, seed: int = 1) -> Plan:
    return Plan(runs=runs, seed=seed, trigger_seconds=max(30.0, runs / 8.0))


def smoke(runs: int = 60, seed: int = 1) -> Plan:
    """Fewer kills and a shorter burst; every other fault kind once."""
    return Plan(
        runs=runs,
        seed=seed,
        trigger_seconds=max(40.0, runs / 1.5),
        kills=2,
        burst_seconds=6.0,
        drain_leases=10.0,
    )
