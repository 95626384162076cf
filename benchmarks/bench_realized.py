"""Realized savings on the simulated fleet: do the holdout arm and the bootstrap over jobs tell
the fleet's truth, and how soon do they catch a config that slows the fleet down.

The demo's fleet (pipelines.demo.DemoSettings: its seed and release cadence, 2,000 jobs, as many
programs as the demo runs: synthetic graphs here, since only their count matters) runs `--days`
days under a store with an entry for every (graph, environment) it runs, each with the default
holdout share, its arm chosen by the hook's rule. The simulator knows each entry's true effect
(its expected speedup times a per-entry factor, sigma 2%, or an injected regression) and what it
really saved; `ranking.realized` sees only the rows. The rows go from the simulator's drop
batches straight to `realized_speedups` and `realized_savings`, with chip_seconds added as
ingestion adds it: no Parquet, no nightly run, the same arithmetic in seconds.

Measured side by side, per fleet size:
- an honest fleet (every true effect near its expected one): realized savings over the whole
  window against the truth over the same (decided) entries, and the decided entries' share of
  all true savings; entries that a nightly check over the trailing `--window` days finds
  regressed (interval wholly below 1), the false invalidations (target 0); the holdout's cost,
  its chip-seconds x (true - 1), as a share of the true savings;
- injected regressions: the most-run entry of this machine's environment set to a true speedup
  of 0.90, then 0.95, against its expected one above 1: the days until the realized interval
  over the days since delivery lies wholly below 1.

    python benchmarks/bench_realized.py [--jobs 2000,20000] [--regression-jobs 2000,4000,10000,20000]
                                        [--days 30] [--window 7] [--min-jobs 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from provenance import describe

from console.progress import progress_bar
from hlo.environment import Environment, store_key
from pipelines.demo import DemoSettings
from ranking.realized import MIN_JOBS, RUN_COLUMNS, realized_savings, realized_speedups
from storage.store_schema import DEFAULT_HOLDOUT_SHARE
from workloads.simulator import drops, fleet
from workloads.simulator.catalog import SCALES

DEMO = DemoSettings()
GRAPHS = len(DEMO.workloads) * len(SCALES)
FINGERPRINTS = [hashlib.blake2b(f"graph-{g}".encode(), digest_size=16).hexdigest() for g in range(GRAPHS)]
STEP_SECONDS = np.geomspace(0.002, 0.05, GRAPHS)
EXPECTED = (1.12, 1.05, 1.25, 1.08, 1.18, 1.04, 1.30, 1.10)[:GRAPHS]  # each graph's tuned speedup
HERE = Environment("cpu", "cpu:bench", 1, "jaxlib-bench")
FIRST_DAY = 300  # days since fleet.EPOCH: releases have been coming out for a while
VERSION = 1
REGRESSIONS = (0.90, 0.95)
HOUR = 3600.0


@dataclass(frozen=True)
class Day:
    """One simulated day: its graph_runs rows (RUN_COLUMNS) and the fleet's truth."""

    runs: pa.Table
    truth: fleet.Truth


@dataclass(frozen=True)
class Honest:
    """An honest fleet's window, in chip-hours."""

    jobs: int
    entries: int  # (key, version) hit in the window
    decided: int  # of them with a realized speedup over the window
    true_saved: float  # by every entry's tuned runs
    true_saved_decided: float  # by the decided entries' tuned runs
    realized: float  # the realized estimate of the decided entries' savings
    realized_interval: tuple[float, float] | None  # None: no entry decided
    booked_decided: float  # the decided entries' savings at their expected speedups
    holdout_forgone: float  # the holdout runs' chip-hours x (true - 1)
    nightly_checks: int  # entry-nights with a realized speedup
    below_one: int  # entries whose true effect is below 1 (an expected speedup near 1, drawn under it)
    caught: int  # of them, found regressed on some night: right
    false_invalidations: int  # entries with a true effect of 1 or more found regressed on some night
    seconds: float


@dataclass(frozen=True)
class Regression:
    """An injected regression and when the holdout caught it."""

    jobs: int
    true_speedup: float
    expected_speedup: float
    detected_day: int | None  # days since delivery until the interval lay below 1 (None: not in the window)
    speedup: float | None  # the realized speedup then (or on the last day)
    interval: tuple[float, float] | None
    holdout_jobs: int
    tuned_jobs: int


def fleet_days(spec: fleet.FleetSpec, lookup: fleet.TunedLookup, days: int, desc: str,
               progress: bool) -> Iterator[Day]:
    """`days` days of `spec`'s fleet under the store `lookup`."""
    jobs = fleet.make_jobs(spec, GRAPHS)
    for day in progress_bar(range(FIRST_DAY, FIRST_DAY + days), desc=desc, unit="day", enabled=progress):
        rows = fleet.simulate_day(jobs, spec, day, STEP_SECONDS, HERE)
        rows, hits = fleet.apply_hits(rows, FINGERPRINTS, lookup, spec)
        drop = pa.concat_tables(drops.graph_run_batches(rows, hits, jobs, day, FINGERPRINTS))
        chip_seconds = pc.multiply(pc.cast(drop.column("chips"), pa.float64()), drop.column("seconds"))
        yield Day(drop.append_column("chip_seconds", chip_seconds).select(RUN_COLUMNS),
                  fleet.day_truth(rows, hits, jobs))


def store(share: float, only: tuple[str, str] | None = None) -> fleet.TunedLookup:
    """An entry for every (graph, environment) (or for `only`), at its graph's expected speedup,
    holding out `share` of its jobs."""
    def lookup(fingerprint: str, env_key: str) -> fleet.Hit | None:
        if only is not None and (fingerprint, env_key) != only:
            return None
        return fleet.Hit(store_key(fingerprint, env_key), VERSION, EXPECTED[FINGERPRINTS.index(fingerprint)], share)
    return lookup


def spec_of(jobs: int, regressions: tuple[tuple[str, float], ...] = ()) -> fleet.FleetSpec:
    """The demo's fleet at `jobs` jobs."""
    return fleet.FleetSpec(jobs=jobs, seed=DEMO.seed, release_every_days=DEMO.release_every_days,
                           regressions=regressions)


def honest(jobs: int, days: int, window: int, share: float, settings: dict, progress: bool) -> Honest:
    """The honest fleet's window: savings against the truth, nightly false invalidations."""
    started = time.perf_counter()
    history: list[Day] = []
    flagged: set[tuple[str, int]] = set()
    checks = 0
    for day in fleet_days(spec_of(jobs), store(share), days, f"honest fleet, {jobs:,} jobs", progress):
        history.append(day)
        nightly = realized_speedups(pa.concat_tables(d.runs for d in history[-window:]), **settings)
        checks += sum(r.decided for r in nightly)
        flagged |= {(r.key, r.config_version) for r in nightly if r.regressed}
    runs = pa.concat_tables(d.runs for d in history)
    realized = realized_speedups(runs, **settings)
    savings = realized_savings(runs, realized).total
    effects = {key: effect for d in history for key, effect in d.truth.effects.items()}
    below = {key for key, effect in effects.items() if effect < 1.0}
    flagged_keys = {key for key, _ in flagged}
    decided = {r.key for r in realized if r.decided}
    tuned = runs.filter(pc.equal(runs.column("holdout"), False))
    per_key = tuned.group_by("config_key").aggregate([("chip_seconds", "sum")]).to_pylist()
    true_decided = sum(row["chip_seconds_sum"] * (effects[row["config_key"]] - 1.0)
                       for row in per_key if row["config_key"] in decided)
    return Honest(
        jobs=jobs, entries=len(realized), decided=len(decided),
        true_saved=sum(d.truth.saved for d in history) / HOUR, true_saved_decided=true_decided / HOUR,
        realized=savings.realized.estimate / HOUR if savings.realized else 0.0,
        realized_interval=(savings.realized.low / HOUR, savings.realized.high / HOUR) if savings.realized else None,
        booked_decided=savings.booked_decided / HOUR,
        holdout_forgone=sum(d.truth.forgone for d in history) / HOUR, nightly_checks=checks,
        below_one=len(below), caught=len(flagged_keys & below), false_invalidations=len(flagged_keys - below),
        seconds=time.perf_counter() - started)


def most_run_here(jobs: int) -> int:
    """The graph most of the fleet's jobs on this machine's environment run."""
    population = fleet.make_jobs(spec_of(jobs), GRAPHS)
    graphs = population.graphs[population.kind == fleet.HERE_KIND].ravel()
    return int(np.bincount(graphs[graphs >= 0], minlength=GRAPHS).argmax())


def regression(jobs: int, true_speedup: float, days: int, share: float, settings: dict,
               progress: bool) -> Regression:
    """Days until the holdout shows the most-run entry here, slowed to `true_speedup`, regressed."""
    graph = most_run_here(jobs)
    key = store_key(FINGERPRINTS[graph], HERE.key())
    spec = spec_of(jobs, regressions=((key, true_speedup),))
    lookup = store(share, (FINGERPRINTS[graph], HERE.key()))
    history: list[pa.Table] = []
    found = None
    for day in fleet_days(spec, lookup, days, f"{true_speedup:.2f}x regression, {jobs:,} jobs", progress):
        history.append(day.runs)
        [found] = realized_speedups(pa.concat_tables(history), **settings)
        if found.regressed:
            break
    return Regression(
        jobs=jobs, true_speedup=true_speedup, expected_speedup=EXPECTED[graph],
        detected_day=len(history) if found.regressed else None,
        speedup=found.speedup and found.speedup.estimate,
        interval=(found.speedup.low, found.speedup.high) if found.speedup else None,
        holdout_jobs=found.holdout.jobs, tuned_jobs=found.tuned.jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=f"{DEMO.jobs},{10 * DEMO.jobs}",
                        help="fleet sizes of the honest fleet, comma-separated (default: the demo's and 10x)")
    parser.add_argument("--regression-jobs", default=",".join(str(k * DEMO.jobs) for k in (1, 2, 5, 10)),
                        help="fleet sizes of the injected regressions (default: the demo's, 2x, 5x, 10x)")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--window", type=int, default=7, help="days of runs each nightly check reads")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per entry")
    parser.add_argument("--min-jobs", type=int, default=MIN_JOBS, help="jobs each arm needs for a realized speedup")
    parser.add_argument("--holdout-share", type=float, default=DEFAULT_HOLDOUT_SHARE,
                        help="share of each entry's jobs held out (the demo holds out 0.2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(n) for n in args.jobs.split(",")]
    settings = {"resamples": args.resamples, "min_jobs": args.min_jobs}
    honest_runs = [honest(n, args.days, args.window, args.holdout_share, settings, not args.json) for n in sizes]
    regressions = [regression(n, s, args.days, args.holdout_share, settings, not args.json) for s in REGRESSIONS
                   for n in (int(n) for n in args.regression_jobs.split(","))]
    if args.json:
        print(json.dumps({"honest": [dataclasses.asdict(h) for h in honest_runs],
                          "regressions": [dataclasses.asdict(r) for r in regressions]}, indent=1))
        return
    print(f"the demo's fleet (seed {DEMO.seed}, a release every {DEMO.release_every_days} days, "
          f"{GRAPHS} programs), {args.days} days, holdout share {args.holdout_share}, "
          f"99% intervals over jobs ({args.resamples} resamples, {args.min_jobs} jobs an arm at least):")
    for h in honest_runs:
        print(f"\n{h.jobs:,} jobs, every true effect within a few % of its expected one "
              f"({h.seconds:.0f} s):")
        print(f"  entries decided: {h.decided} of {h.entries}, holding "
              f"{h.true_saved_decided / max(h.true_saved, 1e-9):.1%} of the true savings")
        interval = (f"[{h.realized_interval[0]:,.0f}, {h.realized_interval[1]:,.0f}]"
                    if h.realized_interval else "")
        print(f"  realized savings of the decided entries: {h.realized:,.0f} chip-hours "
              f"{interval}, truth {h.true_saved_decided:,.0f}: "
              f"{h.realized / max(h.true_saved_decided, 1e-9):.3f}x (target within 5%); booked "
              f"{h.booked_decided:,.0f} ({h.booked_decided / max(h.true_saved_decided, 1e-9):.3f}x)")
        print(f"  false invalidations: {h.false_invalidations} entries over {h.nightly_checks:,} "
              f"nightly checks of the trailing {args.window} days (target 0); {h.caught} of the "
              f"{h.below_one} entries whose true effect fell below 1 caught")
        print(f"  the holdout's cost: {h.holdout_forgone:,.0f} chip-hours forgone, "
              f"{h.holdout_forgone / max(h.true_saved, 1e-9):.1%} of the true savings")
    print("\ninjected regressions on the most-run entry of this machine's environment:")
    for r in regressions:
        when = (f"detected on day {r.detected_day}" if r.detected_day is not None
                else f"not detected in {args.days} days")
        shown = (f"{r.speedup:.3f}x [{r.interval[0]:.3f}, {r.interval[1]:.3f}]" if r.interval
                 else "undecided")
        print(f"  true {r.true_speedup:.2f}x (expected {r.expected_speedup:.2f}x), {r.jobs:>7,} jobs: "
              f"{when:<28} realized {shown}, {r.holdout_jobs} holdout / {r.tuned_jobs} tuned jobs")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
