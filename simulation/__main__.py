"""``python -m simulation``: run seeds of the whole system's simulation and check every
invariant (docs/reliability.md, "The simulation").

    python -m simulation                  # the standard set: fixed seeds, then fresh ones
    python -m simulation --seed 17        # replay one seed (same history, byte for byte)
    python -m simulation --seeds 10000    # seeds 1..10000
    python -m simulation --mutant lease-fence --seeds 20   # prove a broken guard is caught
    python -m simulation --seed 17 --shrink                # reduce a failing seed

Prints one line per failing seed (the seed, the invariant, what happened, the last
events of its trace, and the command that replays it) and one summary line with the
figures. Exits 1 if any seed broke an invariant (with ``--mutant``: if none did).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # set order must not vary between runs: the same seed, the same history
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, "-m", "simulation", *sys.argv[1:]])

import argparse
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, fields, replace
from typing import Any

from simulation.mutants import MUTANTS
from simulation.services import Faults
from simulation.simulator import Outcome, Scenario, Simulation

TRACE_SHOWN = 40
FIXED_SEEDS = range(1, 45)
"""The seeds every standard run replays (among them, every seed that once broke something:
docs/simulation.md, "Defects it found")."""
FRESH_SEEDS = 44
"""Fresh random seeds added to the fixed ones, printed so a failure can be replayed."""
STANDARD_RUNS = 1100
"""Triggers of each seed of the standard set: with children, callbacks, retries and
duplicates, about 1,300 runs, so the set simulates about 115,000."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__)
    parser.add_argument("--seed", type=int, action="append", help="one seed (repeatable)")
    parser.add_argument("--seeds", type=int, help="seeds 1..N")
    parser.add_argument("--fresh", type=int, default=None, help="add N fresh random seeds")
    parser.add_argument("--mutant", help="break one guard (simulation/mutants.py)")
    parser.add_argument("--shrink", action="store_true", help="reduce each failing seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    for spec in fields(Scenario):
        if spec.type in ("int", "float"):
            parser.add_argument(f"--{spec.name.replace('_', '-')}", type=float, default=None)
    args = parser.parse_args(argv)

    standard = not args.seed and not args.seeds
    scenario = Scenario(runs=STANDARD_RUNS) if standard else Scenario()
    for spec in fields(Scenario):
        value = getattr(args, spec.name, None)
        if value is not None:
            changes: dict[str, Any] = {spec.name: int(value) if spec.type == "int" else value}
            scenario = replace(scenario, **changes)
    seeds = chosen_seeds(args.seed, args.seeds, args.fresh)
    return run(seeds, scenario, args.mutant, shrink=args.shrink, jobs=args.jobs)


def chosen_seeds(one: list[int] | None, count: int | None, fresh: int | None) -> list[int]:
    if one:
        seeds = list(one)
    elif count:
        seeds = list(range(1, count + 1))
    else:
        seeds = list(FIXED_SEEDS)
        fresh = FRESH_SEEDS if fresh is None else fresh
    if fresh:
        picked = [secrets.randbelow(2**31) for _ in range(fresh)]
        print(f"fresh seeds: {' '.join(map(str, picked))}", flush=True)
        seeds += picked
    return seeds


def run(
    seeds: list[int], scenario: Scenario, mutant: str | None, *, shrink: bool, jobs: int
) -> int:
    started, cpu = time.monotonic(), time.process_time()
    failed: list[Outcome] = []
    runs = 0
    child_cpu = 0.0
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(seeds)))) as pool:
        for outcome, used in pool.map(one_seed, seeds, repeat(scenario), repeat(mutant)):
            runs += outcome.runs
            child_cpu += used
            if not outcome.passed:
                failed.append(outcome)
                report(outcome, scenario, mutant)
    cpu_seconds = child_cpu + time.process_time() - cpu
    print(
        f"simulation: {len(seeds)} seeds, {runs} runs, {len(failed)} failing"
        f"{f' (mutant {mutant})' if mutant else ''}; {time.monotonic() - started:.1f} s, "
        f"{runs / max(cpu_seconds, 1e-9):.0f} simulated runs per CPU second",
        flush=True,
    )
    if shrink:
        for outcome in failed:
            shrunk(outcome, scenario, mutant)
    if mutant:
        return 0 if failed else 1
    return 1 if failed else 0


def repeat(value: Any) -> Iterator[Any]:
    while True:
        yield value


def one_seed(seed: int, scenario: Scenario, mutant: str | None) -> tuple[Outcome, float]:
    """One seed's outcome, and the CPU seconds it took."""
    cpu = time.process_time()
    with MUTANTS[mutant].applied() if mutant else nullcontext():
        outcome = Simulation(seed, scenario).run()
    return outcome, time.process_time() - cpu


def replay_command(seed: int, scenario: Scenario, mutant: str | None) -> str:
    default = asdict(Scenario())
    changed = [
        f"--{name.replace('_', '-')} {value}"
        for name, value in asdict(scenario).items()
        if value != default[name] and isinstance(value, int | float)
    ]
    if mutant:
        changed.append(f"--mutant {mutant}")
    extra = f' ARGS="{" ".join(changed)}"' if changed else ""
    return f"make simulate SEED={seed}{extra}"


def report(outcome: Outcome, scenario: Scenario, mutant: str | None) -> None:
    print(f"\nseed {outcome.seed} FAILED ({outcome.runs} runs, digest {outcome.digest[:16]}):")
    for invariant, line in outcome.violations[:10]:
        print(f"  {invariant}: {line[:400]}")
    if len(outcome.violations) > 10:
        print(f"  ... and {len(outcome.violations) - 10} more")
    for run_id, lines in outcome.about.items():
        print(f"  the last {len(lines)} events of run {run_id} (requests on its record):")
        for line in lines:
            print(f"    {line[:200]}")
    print(f"  the last {TRACE_SHOWN} events of its trace:")
    for line in outcome.trace[-TRACE_SHOWN:]:
        print(f"    {line[:200]}")
    print(f"  replay: {replay_command(outcome.seed, scenario, mutant)}", flush=True)


def shrunk(outcome: Outcome, scenario: Scenario, mutant: str | None) -> None:
    """Reduce runs, processes and faults while the seed still breaks the same invariant."""
    broken = outcome.violations[0][0]

    def still_fails(candidate: Scenario) -> bool:
        result, _ = one_seed(outcome.seed, candidate, mutant)
        return any(name == broken for name, _ in result.violations)

    current = scenario
    for _ in range(8):
        moved = False
        for candidate in smaller(current):
            if still_fails(candidate):
                current, moved = candidate, True
                break
        if not moved:
            break
    print(
        f"\nseed {outcome.seed} shrunk ({broken}): {replay_command(outcome.seed, current, mutant)}"
    )


def smaller(scenario: Scenario) -> Iterable[Scenario]:
    """Each one-step reduction of ``scenario``: fewer runs, workers, maintenance jobs,
    slots; one fault, crashes or pauses off."""
    if scenario.runs > 4:
        yield replace(scenario, runs=scenario.runs // 2)
    for name in ("workers", "maintenance", "concurrency"):
        if getattr(scenario, name) > 1:
            fewer: dict[str, Any] = {name: getattr(scenario, name) - 1}
            yield replace(scenario, **fewer)
    for name in ("crashes_per_minute", "freezes_per_minute", "cancels"):
        if getattr(scenario, name):
            off: dict[str, Any] = {name: 0}
            yield replace(scenario, **off)
    for spec in fields(Faults):
        if getattr(scenario.faults, spec.name):
            fault_off: dict[str, Any] = {spec.name: 0.0}
            yield replace(scenario, faults=replace(scenario.faults, **fault_off))


if __name__ == "__main__":
    sys.exit(main())
