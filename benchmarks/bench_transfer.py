"""Transfer quality on the zoo: a model tuned at one shape, then at others with a transfer check
and with a full search from the defaults, side by side in one run.

    python benchmarks/bench_transfer.py [--workloads nbody-s,mlp-s] [--scales 1,2,4] [--keep DIR] [--json]

Per workload (the zoo's small ones by default), in a fresh home:
1. its program at each of `--scales` (`workloads.zoo.variant`: the batch, for the GNN its nodes and
   edges, times the scale) dumped by XLA and ingested (so each graph has its family);
2. the first scale tuned with `fdo tune`'s full search (the default schedule and budget, its
   race, pruning and verification in fresh workers) and, where accepted, delivered: the family's
   verified config;
3. at each other scale, two tasks in turns (which goes first alternates, so a drift in the
   machine's load falls on both): the transfer check the nightly loop runs first
   (`fdo tune --transfer-check`: the family's configs alone, the best verified as a winner is),
   and the full search from the defaults (`fdo tune --no-transfer`). The transfers are read
   before either runs, so neither sees the other's result.
Figures per (workload, scale): each task's verified speedup (1 where not accepted) and its wall
seconds; the gain share, log(transfer's speedup) / log(the full search's), where the full search
found a significant gain at that scale; and the time ratio, the transfer's seconds over the
search's. Medians over the scales where the full search found a gain. A scale where the family's
config does little there shows as a share well under 1.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import describe

from delivery.deliver import deliver
from hlo.environment import cpu_model_name, current_environment
from hlo.module import load_file
from ingest.symbols import ingest_symbols
from pipelines.stages import transfers_for
from storage.beam_logging import quiet_beam_logging
from storage.home_factory import open_home
from tuner.candidates import Candidate
from tuner.result import TuneResult
from tuner.target import graph_subject
from tuner.task import tune_module
from tuner.tune import TuneSettings
from workloads import zoo
from workloads.zoo.dump import dump_workload

SMALL = [w.name for w in zoo.all_workloads() if w.size == "s"]


def gain(result: TuneResult | None) -> float:
    """A task's verified speedup where it was accepted, else 1 (nothing delivered)."""
    return result.speedup.estimate if result is not None and result.accepted and result.speedup else 1.0


def timed(task: Any) -> tuple[TuneResult, float]:
    started = time.perf_counter()
    result = task()
    return result, time.perf_counter() - started


def workload(name: str, scales: list[int], root: Path, turn: int) -> list[dict[str, Any]]:
    """Steps 1 to 3 for one workload; a row per other scale."""
    home = open_home(root / name)
    dumps = [dump_workload(zoo.variant(name, scale), root / name / "dumps") for scale in scales]
    ingest_symbols(dumps, home)
    modules = [load_file(next(d.glob("*.before_optimizations.txt"))) for d in dumps]
    env_key = current_environment().key()
    base, base_seconds = timed(lambda: tune_module(modules[0], home, TuneSettings()))
    print(f"{name} x{scales[0]}: {base.status} {gain(base):.3f}x in {base_seconds:.0f} s; config {base.config}",
          flush=True)
    if base.accepted:
        deliver(home, ("--direct_running_mode=in_memory",))
    candidates = [Candidate(f"{name} x{s}", graph_subject(m), env_key) for s, m in zip(scales[1:], modules[1:])]
    transfers = transfers_for(home, candidates)
    rows = []
    for index, (scale, module, found) in enumerate(zip(scales[1:], modules[1:], transfers)):
        def check() -> TuneResult | None:
            if not found:
                return None
            return tune_module(module, home, TuneSettings(transfers=found, transfer_check=True,
                                                          budget_evals=len(found)))

        def search() -> TuneResult:
            return tune_module(module, home, TuneSettings())

        order = [("transfer", check), ("search", search)]
        if (turn + index) % 2:
            order.reverse()
        done = {arm: timed(task) for arm, task in order}
        checked, check_seconds = done["transfer"]
        searched, search_seconds = done["search"]
        full, moved = gain(searched), gain(checked)
        row = {"workload": name, "scale": scale, "base_speedup": gain(base), "base_config": base.config,
               "transfers": [t.describe() for t in found],
               "transfer_speedup": moved, "transfer_status": str(checked.status) if checked else "no transfers",
               "transfer_seconds": check_seconds if checked else 0.0,
               "search_speedup": full, "search_status": str(searched.status), "search_config": searched.config,
               "search_seconds": search_seconds,
               "gain_share": math.log(moved) / math.log(full) if searched.accepted else None,
               "time_ratio": check_seconds / search_seconds if checked else 0.0}
        print(json.dumps(row, default=str), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(SMALL))
    parser.add_argument("--scales", default="1,2,4", help="the first is tuned; the others transferred to")
    parser.add_argument("--keep", type=Path, default=None, help="keep the homes under this directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    quiet_beam_logging()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    scales = [int(s) for s in args.scales.split(",")]
    rows = []
    for turn, name in enumerate(args.workloads.split(",")):
        rows += workload(name, scales, root, turn)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    found = [r for r in rows if r["gain_share"] is not None]
    summary = {"cpu": cpu_model_name(), "rows": rows,
               "median_gain_share": statistics.median(r["gain_share"] for r in found) if found else None,
               "median_time_ratio": statistics.median(r["time_ratio"] for r in found) if found else None,
               "with_gain": len(found)}
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
        return
    print(f"\nCPU {summary['cpu']}")
    print(f"{'workload':<16} {'scale':>5} {'base':>7} {'transfer':>9} {'search':>7} {'share':>6} "
          f"{'transfer s':>10} {'search s':>9} {'ratio':>6}")
    for r in rows:
        share = "-" if r["gain_share"] is None else f"{r['gain_share']:.2f}"
        print(f"{r['workload']:<16} {r['scale']:>5} {r['base_speedup']:>6.3f}x {r['transfer_speedup']:>8.3f}x "
              f"{r['search_speedup']:>6.3f}x {share:>6} {r['transfer_seconds']:>10.0f} {r['search_seconds']:>9.0f} "
              f"{r['time_ratio']:>6.2f}")
    if found:
        print(f"over the {len(found)} shapes where the full search found a significant gain: median gain share "
              f"{summary['median_gain_share']:.2f}, median time ratio {summary['median_time_ratio']:.2f}")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
