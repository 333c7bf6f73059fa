"""``python -m chaos [--runs N] [--seed S] [--backend aws-local|moto] [--smoke]``: one
chaos run; prints one figure line, writes the figures as JSON to chaos/results/ and
exits 1 on any lost, stuck or doubly succeeded run, unexplained extra execution, or
group that did not join once with its children once and its parent resumed once, or
whose outcome is not the one its mode gives (it fails, tolerates failed children, or
is retried with ``retry-failed``: chaos/fanout.py)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from chaos import backends, fanout, plan
from chaos.app import KEY_LIMIT, LEASE_SECONDS, RATE
from chaos.capabilities import CapabilityFigures
from chaos.fanout import GroupFigures
from chaos.ledger import Figures
from chaos.runner import Chaos

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MAX_LOG_LINES = 20
"""Per process log, the last lines naming a violating run that a failure prints."""


def _leases(values: list[float | None]) -> str:
    shown = ["none-in-flight" if v is None else f"{v:.2f}" for v in values]
    return "[" + ",".join(shown) + "]"


def group_part(groups: GroupFigures) -> str:
    return (
        f"groups={groups.groups} (maps={groups.maps} thens={groups.thens}) "
        f"unjoined={len(groups.unjoined)} miscounted={len(groups.miscounted)} "
        f"stray_children={len(groups.stray_children)} "
        f"not_resumed_once={len(groups.not_resumed_once)} "
        f"wrong_results={len(groups.wrong_results)} "
        f"callbacks_not_once={len(groups.callbacks_not_once)} "
        f"wrong_outcomes={len(groups.wrong_outcomes)} "
        f"group_resumes={groups.resumes} joined_before_wait={groups.joined_before_wait} "
        f"modes=({' '.join(f'{k}={v}' for k, v in sorted(groups.modes.items()))}) "
        f"retried={groups.retried} retry_refusals={groups.retry_refusals}"
    )


def capability_part(capabilities: CapabilityFigures) -> str:
    return (
        f"ordered={capabilities.ordered_runs} (keys={capabilities.ordering_keys}) "
        f"out_of_order={len(capabilities.out_of_order)} keyed={capabilities.keyed_runs} "
        f"(limit={KEY_LIMIT}) most_at_once={capabilities.most_at_once} "
        f"over_limit={len(capabilities.over_limit)} "
        f"occurrences={capabilities.occurrences} "
        f"duplicate_occurrences={len(capabilities.duplicate_occurrences)} "
        f"missed_occurrences={len(capabilities.missed_occurrences)} "
        f"rated_starts={capabilities.rated_starts} (rate={RATE}/s) "
        f"most_started_in_a_second={capabilities.most_started_in_a_second}"
    )


def figure_line(
    figures: Figures,
    groups: GroupFigures,
    capabilities: CapabilityFigures,
    injected: dict[str, int],
    outages: list[float],
    elapsed: float,
) -> str:
    faults = " ".join(f"{k}={v}" for k, v in injected.items())
    faults += f" db_outage_s={outages}"
    return (
        f"chaos: runs={figures.runs} children={figures.children} "
        f"faults={sum(injected.values())} ({faults}) "
        f"lost={len(figures.lost)} stuck={len(figures.stuck)} "
        f"double_successes={len(figures.double_successes)} "
        f"extra_executions={figures.extra_explained + figures.extra_unexplained} "
        f"(explained_by_kill_freeze_or_outage={figures.extra_explained} "
        f"of_which_outage={figures.extra_by_outage} "
        f"unexplained={figures.extra_unexplained}) "
        f"zombie_completions={figures.zombie_completions} "
        f"executions={figures.executions} {group_part(groups)} "
        f"{capability_part(capabilities)} "
        f"recovery_after_kill={_leases(figures.recovery_leases)}x{LEASE_SECONDS:g}s-lease "
        f"chaos_phase={elapsed:.0f}s"
    )


def violations(
    figures: Figures, groups: GroupFigures, capabilities: CapabilityFigures
) -> list[str]:
    found = []
    if capabilities.rate_exceeded:
        found.append(
            f"rate limit exceeded: {capabilities.most_started_in_a_second} starts in a second"
        )
    for name, runs in (
        ("out of order", capabilities.out_of_order),
        ("over a concurrency limit", capabilities.over_limit),
        ("schedule occurrence created twice", capabilities.duplicate_occurrences),
        ("schedule occurrence missed", capabilities.missed_occurrences),
        ("lost", figures.lost),
        ("stuck", figures.stuck),
        ("double success", figures.double_successes),
        ("unexplained extra execution", figures.unexplained_runs),
    ):
        if runs:
            found.append(f"{name}: {len(runs)} run(s), e.g. {runs[:5]}")
    for name, ids in fanout.violations(groups).items():
        if ids:
            found.append(f"{name}: {len(ids)}, e.g. {ids[:5]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=backends.BACKENDS, default=backends.AWS_LOCAL)
    parser.add_argument("--smoke", action="store_true", help="60 runs, fewer faults")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    chosen = (plan.smoke if args.smoke else plan.full)(seed=args.seed)
    if args.runs is not None:
        chosen = (plan.smoke if args.smoke else plan.full)(runs=args.runs, seed=args.seed)
    out_dir = RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out_dir / "chaos.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    logging.getLogger("chaos").addHandler(handler)
    logging.getLogger("chaos").setLevel(logging.INFO)
    began = time.monotonic()
    with backends.start(args.backend) as backend:
        chaos = Chaos(chosen, backend, out_dir)
        figures, groups, injected, elapsed = chaos.run()
    outages = chaos.details.get("db_outages_seconds", [])
    line = figure_line(figures, groups, chaos.capabilities, injected, outages, elapsed)
    line += f" elapsed={time.monotonic() - began:.0f}s"
    problems = violations(figures, groups, chaos.capabilities)
    report = {
        "command": " ".join(["python -m chaos", *(argv if argv is not None else sys.argv[1:])]),
        "backend": args.backend,
        "plan": asdict(chosen),
        "injected": injected,
        "figures": asdict(figures),
        "groups": asdict(groups),
        "capabilities": asdict(chaos.capabilities),
        "faults": chaos.details,
        "elapsed_seconds": elapsed,
        "violations": problems,
        "line": line,
    }
    (out_dir / "figures.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(line, flush=True)
    for problem in problems:
        print(f"chaos: VIOLATION {problem}", file=sys.stderr)
    for run_id, history in chaos.details.get("violating_runs", {}).items():
        print(f"chaos: history of {run_id}:", file=sys.stderr)
        for entry in sorted(
            [("execution", e["started"], e) for e in history["executions"]]
            + [("event", e["at"], e) for e in history["events"]],
            key=lambda t: t[1],
        ):
            print(f"chaos:   {entry[1]:.3f} {entry[0]} {json.dumps(entry[2])}", file=sys.stderr)
        for log_file in sorted(out_dir.glob("*.log")):
            lines = [line for line in log_file.read_text().splitlines() if run_id in line]
            for line in lines[-MAX_LOG_LINES:]:
                print(f"chaos:   {log_file.stem}: {line}", file=sys.stderr)
    for group in chaos.details.get("violating_groups", []):
        print(f"chaos: group {json.dumps(group)}", file=sys.stderr)
    print(f"chaos: details in {out_dir}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
