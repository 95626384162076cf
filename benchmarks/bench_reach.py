"""The loop's reach on a fleet like a real one: nights of the reach fleet with transfer and
without, side by side in one run.

    python benchmarks/bench_reach.py [--nights 3] [--tune-minutes 15] [--jobs 20000] [--top 6]
                                     [--baseline-top N] [--arms transfer,sharing,no-transfer] [--keep DIR]
                                     [--first-night DATE] [--json]

The reach fleet (`fdo simulate --fleet reach`: every zoo workload at three shapes, popularity by
model, each program across releases, device counts and partitionings; its programs compiled and
profiled for real here) runs a day, hands its dumps and profiles to the home's inbox, and the
nightly loop (`pipelines.nightly`) runs for that date, in a home per arm (`--arms`):
- transfer: the loop as it is (keys measured alike share a result; transfer checks first, then
  searches by worth seeded with transfers: `tuner.plan`);
- sharing: no transfer checks and searches from the defaults alone, keys measured alike still
  sharing a result (`NightlySettings.share_alike`);
- no-transfer: each key searched on its own, as the loop did before transfer
  (`fdo nightly --no-transfer`).
Every home runs the very same fleet (each starts with the first one's catalog), each fleet's
jobs taking the configs its own store holds; the arms' order turns round night by night, so
none always runs on the busier machine. After each night, from each home's ledger:
- the shares of the tunable chip-time (this machine's platform and device kind, jobs that accept
  tuning, over the window) that run a verified faster config and that are decided (that, or the
  defaults verified best: `tuner.decided`);
- the tune stage: its seconds, the transfer checks and searches run and accepted, and the keys
  each reached (a task's result reaches the keys measured alike), and the keys that took a
  result with no task.

`--keep` on a directory kept before goes on from the last night all its homes ran whole (the
day after, as night N+1), so a long run can be taken in parts; a night killed mid-way is
finished (its day is not simulated again once its ingest is done), and an arm that ran it whole
is not run again. The fleet is a function of its dates: `--first-night` gives two runs the same
fleet (new homes only: kept homes that ran a night go on from it).

At the end, what limits the figures: the tunable chip-time of keys no machine here can measure
(spanning more devices than a per-device program can be built for), of keys the ranking left
out (the long tail, beyond `--rank-top`), and of keys still open; and of the decided, the keys
whose defaults were verified best, which bound the faster share.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from provenance import describe

from execution.sharded import MAX_PARTITION_DEVICES, spans
from hlo.environment import cpu_model_name, current_environment, partitioning_from_json
from ingest.tables import GRAPH_RUNS, GRAPHS
from pipelines.nightly import (
    STAGES,
    NightlySettings,
    StageStatus,
    coverage_by_night,
    ledger_rows,
    run_nightly,
    stage_attempts,
)
from ranking.tables import CANDIDATES
from storage.beam_logging import quiet_beam_logging
from storage.home_factory import open_home
from storage.warehouse import Warehouse, partition_days
from tuner.decided import home_statuses
from vocabulary.tuning import KeyDecision
from workloads.simulator.fleet import FleetMode
from workloads.simulator.run import simulate, store_lookup

# Each arm's nightly settings: transfer (checks, seeds, keys measured alike sharing a result);
# sharing alone; neither (each key searched on its own, the loop before transfer).
ARMS = {"transfer": {"transfer": True}, "sharing": {"transfer": False, "share_alike": True},
        "no-transfer": {"transfer": False, "share_alike": False}}
WINDOW_DAYS = 7  # the nightly's savings window (NightlySettings.window_days)


def night(home: Path, arm: str, date: datetime.date, args: argparse.Namespace) -> dict[str, Any]:
    """One simulated day of the reach fleet, then the nightly loop for it, in `home`."""
    started = time.perf_counter()
    if not stage_done(home, date, STAGES[0]):  # a night killed after its ingest resumes without a new day
        simulate(open_home(home), days=1, jobs=args.jobs, seed=args.seed, start=date, mode=FleetMode.REACH,
                 tuned=store_lookup(home), inbox=home / "inbox" / "fleet")
    simulated = time.perf_counter() - started
    top = args.top if ARMS[arm]["transfer"] else args.baseline_top or args.top
    report = run_nightly(open_home(home), NightlySettings(
        date=date, top=top, top_ops=0, tune_evals=args.tune_evals, tune_minutes=args.tune_minutes,
        validate_minutes=args.validate_minutes, rank_top=args.rank_top, rank_min_share=args.rank_min_share,
        beam_args=("--direct_running_mode=in_memory",),
        **ARMS[arm]))
    stages = {s.stage: s for s in report.stages}
    tune = stages["tune"].counts if "tune" in stages else {}
    covered = [n for n in coverage_by_night(open_home(home)) if n.date == date]
    return {"date": date.isoformat(), "ok": report.ok,
            "failed": [f"{s.stage}: {(s.error or '').splitlines()[0]}" for s in report.stages if s.error],
            "faster_share": covered[0].share if covered else None,
            "decided_share": covered[0].decided_share if covered else None,
            "tune_seconds": stages["tune"].seconds if "tune" in stages else None,
            "night_seconds": sum(s.seconds for s in report.stages), "simulate_seconds": simulated,
            **{name: tune.get(name, 0) for name in (
                "checks", "checks_accepted", "checks_keys", "checks_seconds", "searches", "searches_accepted",
                "searches_keys", "searches_seconds", "shared_keys", "out_of_budget")}}


def nights_run(home: Path) -> list[datetime.date]:
    """The dates a kept home's nightly loop ran whole for (its last stage done), in order."""
    return sorted({row["dt"] for row in ledger_rows(open_home(home)).to_pylist()
                   if row["stage"] == STAGES[-1] and row["status"] == StageStatus.DONE})


def stage_done(home: Path, date: datetime.date, stage: str) -> bool:
    """Whether the nightly loop of `date` has done `stage` in `home`."""
    return StageStatus.DONE in stage_attempts(open_home(home), date).get(stage, [])


def limits(home: Path, last: datetime.date, rank_top: int) -> dict[str, float]:
    """Shares of the window's chip-time of this platform's keys (the tunable ones and those no
    machine here can measure) by what stands between them and a decision; of the decided, the
    share whose defaults were verified best (`defaults_best`), which no config can make faster."""
    warehouse = Warehouse(home)
    here = current_environment()
    graphs = {(g["fingerprint"], g["env_key"]): g for g in warehouse.read(GRAPHS).to_pylist()
              if (g["platform"], g["device_kind"]) == (here.platform, here.device_kind)}
    first = last - datetime.timedelta(days=WINDOW_DAYS - 1)
    days = set(partition_days(first, last))
    runs = warehouse.read(GRAPH_RUNS, ["fingerprint", "env_key", "opted_out", "chip_seconds"], days.__contains__)
    runs = runs.filter(pc.invert(runs.column("opted_out")))
    per_key: dict[tuple[str, str], float] = {}
    for row in runs.to_pylist():
        key = (row["fingerprint"], row["env_key"])
        if key in graphs:
            per_key[key] = per_key.get(key, 0.0) + row["chip_seconds"]
    ranked = {(r["fingerprint"], r["env_key"]) for r in warehouse.read(CANDIDATES).to_pylist()
              if r["dt"] == last and r["kind"] == "graph"}
    statuses = home_statuses(open_home(home), last)
    total = sum(per_key.values()) or 1.0
    found = {"unmeasurable": 0.0, "decided": 0.0, "defaults_best": 0.0, "open_ranked": 0.0, "open_unranked": 0.0}
    for key, seconds in per_key.items():
        partitioning = graphs[key]["partitioning"]
        status = statuses.get(key)
        if status is not None and status.decision is not None:
            found["decided"] += seconds
            found["defaults_best"] += seconds if status.decision is KeyDecision.DEFAULTS else 0.0
        elif partitioning and spans(partitioning_from_json(json.loads(partitioning))) > MAX_PARTITION_DEVICES:
            found["unmeasurable"] += seconds
        elif key in ranked:
            found["open_ranked"] += seconds
        else:
            found["open_unranked"] += seconds
    return {name: value / total for name, value in found.items()} | {"tunable_keys": len(per_key)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--tune-minutes", type=float, default=15.0, help="each night's tune stage")
    parser.add_argument("--tune-evals", type=int, default=16, help="evaluations per search")
    parser.add_argument("--top", type=int, default=6, help="searches a night")
    parser.add_argument("--baseline-top", type=int, default=None,
                        help="searches a night for the arms without transfer (default: --top); at --top they "
                             "may leave the stage's minutes unused")
    parser.add_argument("--rank-top", type=int, default=3000, help="graph candidates the ranking keeps")
    parser.add_argument("--rank-min-share", type=float, default=0.0,
                        help="the ranking's long tail, left out (default: none: every key is a candidate)")
    parser.add_argument("--validate-minutes", type=float, default=2.0)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"of {', '.join(ARMS)}")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the homes under this directory; homes kept before go on from their last night")
    parser.add_argument("--first-night", type=datetime.date.fromisoformat, default=None,
                        help="the first night's date (default: the last night is today)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms = args.arms.split(",")
    if not arms or set(arms) - set(ARMS):
        parser.error(f"--arms {args.arms}: of {', '.join(ARMS)}")
    quiet_beam_logging()
    parent = args.keep or Path(tempfile.mkdtemp(prefix="bench-reach-"))
    homes = {arm: parent / arm for arm in arms}
    ran = {arm: nights_run(homes[arm]) if homes[arm].exists() else [] for arm in arms}
    if args.first_night is not None and any(ran.values()):
        last = max(nights[-1] for nights in ran.values() if nights)
        parser.error(f"--first-night {args.first_night}: the homes under {parent} ran nights up to {last}; "
                     "kept homes go on from their last night (leave --first-night out)")
    before = min(ran.values(), key=len)  # kept homes go on from their last whole night
    for home in homes.values():
        home.mkdir(parents=True, exist_ok=True)
    first = args.first_night or (before[-1] + datetime.timedelta(days=1) if before else
                                 datetime.date.today() - datetime.timedelta(days=args.nights - 1))
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for number in range(len(before), len(before) + args.nights):
        date = first + datetime.timedelta(days=number - len(before))
        order = arms if number % 2 == 0 else arms[::-1]
        for arm in order:
            if stage_done(homes[arm], date, STAGES[-1]):
                print(f"{arm}: night {number + 1} ({date}) ran whole before; not run again", file=sys.stderr)
                continue
            catalog = homes[arms[0]] / "simulator" / "catalog"
            mine = homes[arm] / "simulator" / "catalog"
            if not mine.exists() and catalog.exists():
                shutil.copytree(catalog, mine)
            result = night(homes[arm], arm, date, args)
            results[arm].append({"night": number + 1, **result})
            print(json.dumps({"arm": arm, "night": number + 1, **result}), flush=True)
    last = first + datetime.timedelta(days=args.nights - 1)
    summary = {"cpu": cpu_model_name(), "settings": {k: str(v) for k, v in vars(args).items()},
               "nights": results, "limits": {arm: limits(homes[arm], last, args.rank_top) for arm in arms}}
    if args.keep is None:
        shutil.rmtree(parent, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    print(f"\nreach fleet, {args.jobs} jobs, {args.nights} nights, tune stage {args.tune_minutes} min; "
          f"CPU {summary['cpu']}")
    print(f"{'night':>5} {'arm':<12} {'faster':>7} {'decided':>8} {'tune s':>7} {'checks':>9} "
          f"{'searches':>9} {'keys (chk/srch/shared)':>23}")
    for number in range(args.nights):
        for arm in arms:
            r = results[arm][number]
            print(f"{r['night']:>5} {arm:<12} {_pct(r['faster_share']):>7} {_pct(r['decided_share']):>8} "
                  f"{r['tune_seconds'] or 0:>7.0f} {r['checks_accepted']:>4}/{r['checks']:<4} "
                  f"{r['searches_accepted']:>4}/{r['searches']:<4} "
                  f"{r['checks_keys']:>7}/{r['searches_keys']}/{r['shared_keys']}")
    for number in range(args.nights):
        faster = {arm: results[arm][number]["faster_share"] or 0.0 for arm in arms}
        print(f"night {results[arms[0]][number]['night']}: faster share of each arm over the last's: " + ", ".join(
            f"{arm} {faster[arm] / faster[arms[-1]]:.2f}x" if faster[arms[-1]] else f"{arm} -" for arm in arms))
    for arm in arms:
        lim = summary["limits"][arm]
        print(f"{arm}: of the chip-time of this platform's {lim['tunable_keys']} keys, decided {lim['decided']:.1%} "
              f"({lim['defaults_best']:.1%} with the defaults best), "
              f"unmeasurable here {lim['unmeasurable']:.1%}, open and ranked {lim['open_ranked']:.1%}, "
              f"open beyond the ranking {lim['open_unranked']:.1%}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
