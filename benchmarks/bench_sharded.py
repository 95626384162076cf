"""Sharded programs: how well the per-device mode stands in for the whole program, what tuning
costs in each mode, and whether a tuned sharded job gets what the tuner claimed.

    python benchmarks/bench_sharded.py [--parts fidelity,tuning,oracle,job]
        [--workloads mlp-dp4,nbody-dp4,transformer-tp4,transformer-tp8] [--budget-evals 12]
        [--cache DIR] [--json]

Parts (docs/sharded.md has the figures and what they decide):

- fidelity: for each sharded zoo workload, every single move of the tuner's graph space
  (`tuner.schedule.neighbourhood`) is screened as the tuner screens (compiled in a compile worker,
  timed against the default prepared once, `tuner.tune.SEARCH_SETTINGS`), whole on the
  workload's devices (host devices) and per device (its per-device program on one device). A move
  that compiles to the default's program in a mode is 1.0 there. Reported per workload and
  pooled: Spearman's rank correlation of the two modes' speedups, the median and 90th percentile
  of |log(per-device / whole)| as a relative error, and how often the two agree on the screen's
  decision (faster, slower, or neither: the interval's side of 1 +- the noise band).
- tuning: `fdo tune`'s task (`tuner.task.tune_module`, a fresh home each) on one workload in
  each mode at `--budget-evals`: wall minutes, the verified speedup and whether it was accepted,
  and the per-device winner's whole-program speedup (re-measured whole: what the fleet would get).
- oracle: on the sharded transformer (transformer-tp4), the tuner's verified gain in whole mode
  against its one-move oracle: the best single move, re-verified whole in 3 fresh workers, as
  `log(found) / log(oracle)`.
- job: the walk-through's job (examples/sharded_step.py, 4 host devices) run under the hook with
  its step's config in the store, in the tuned arm and in the holdout arm, alternately, `--runs`
  each: the median step time of each arm and their ratio, beside the speedup the store claims.

Every measurement of one figure is taken side by side in one run; the machine's load moves
absolute times, so only ratios are reported. Results are cached by part under `--cache`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provenance import describe

from execution.evaluate import evaluate_independently  # noqa: E402
from execution.flags import CompilerConfig  # noqa: E402
from execution.sharded import Placement  # noqa: E402
from hlo.module import HloModule, from_lowered  # noqa: E402
from tuner.kinds import make_target  # noqa: E402
from tuner.schedule import neighbourhood  # noqa: E402
from tuner.search import Build  # noqa: E402
from tuner.target import graph_subject  # noqa: E402
from tuner.task import tune_module  # noqa: E402
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS, TuneSettings  # noqa: E402
from tuner.worker_evaluator import WorkerEvaluator  # noqa: E402
from vocabulary.measure import MeasureMode  # noqa: E402
from vocabulary.tuning import Kind  # noqa: E402
from workloads.zoo.sharded import get_sharded, sharded_workloads  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path(os.environ.get("FDO_CACHE", Path.home() / ".cache" / "fleet-fdo")) / "sharded"
NOISE = SEARCH_SETTINGS.noise_band


def screens(module: HloModule, placement: Placement, moves: list[tuple[str, Any]]) -> dict[str, float]:
    """Each move's screened speedup over the default (1.0 where it compiles to the default's
    program), measured as `placement` says, keyed by the move's text; with its decision."""
    target = make_target(Kind.GRAPH, graph_subject(module, placement))
    found: dict[str, Any] = {}
    with WorkerEvaluator(target.module.proto, 0, partitioning=placement.compiled_for) as evaluator:
        for name, value in moves:
            config: CompilerConfig = {name: value}
            build: Build = evaluator.build(config).result()
            label = f"{name}={value}"
            if build.error is not None:
                found[label] = {"error": build.error}
            elif build.program == evaluator.default_program:
                found[label] = {"speedup": 1.0, "low": 1.0, "high": 1.0, "identical": True}
            else:
                trial = evaluator.measure(0, config, build, SEARCH_SETTINGS)
                if trial.speedup is None:
                    found[label] = {"error": trial.error}
                else:
                    found[label] = {"speedup": trial.speedup.estimate, "low": trial.speedup.low,
                                    "high": trial.speedup.high, "identical": False}
            print(f"  {placement.mode:>10} {label}: {found[label]}", flush=True)
    return found


def decision(screen: dict[str, Any]) -> str:
    """faster | slower | neither, as a screen's interval says."""
    if screen["low"] > 1 + NOISE:
        return "faster"
    if screen["high"] < 1 - NOISE:
        return "slower"
    return "neither"


def fidelity_of(pairs: list[tuple[dict, dict]]) -> dict[str, Any]:
    """The agreement figures of (whole, per-device) screen pairs, over the moves whose program
    differs from the default's in either mode (a move of the default's program in both is 1.0
    in both: it would only inflate the agreement). `over_p90`: the 90th percentile of how much
    the per-device speedup overstates the whole program's (the margin a per-device win must
    clear for the whole program's gain to be no loss, 9 times in 10: `PER_DEVICE_ERROR`)."""
    active = [(w, p) for w, p in pairs if not (w.get("identical") and p.get("identical"))]
    whole = [w["speedup"] for w, _ in active]
    local = [p["speedup"] for _, p in active]
    errors = sorted(abs(math.log(p / w)) for w, p in zip(whole, local))
    over = sorted(math.log(p / w) for w, p in zip(whole, local))

    def percentile(values: list[float], share: float) -> float | None:
        return math.expm1(values[int(share * (len(values) - 1))]) if values else None

    return {"moves": len(pairs), "active": len(active),
            "spearman": float(stats.spearmanr(whole, local).statistic) if len(active) > 2 else None,
            "median_error": percentile(errors, 0.5), "p90_error": percentile(errors, 0.9),
            "over_p90": percentile(over, 0.9),
            "decisions_agree": sum(decision(w) == decision(p) for w, p in active) / len(active)
            if active else None}


def part_fidelity(names: list[str], cache: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    pooled: list[tuple[dict, dict]] = []
    for name in names:
        cached = cache / f"fidelity-{name}.json"
        if cached.exists():
            # Keyed by mode: a cache written before the mode's value was "per device" reads too.
            measured = {MeasureMode(mode): screened for mode, screened in json.loads(cached.read_text()).items()}
        else:
            workload = get_sharded(name)
            module = from_lowered(workload.lower(), source=f"zoo:{name}")
            target = make_target(Kind.GRAPH, graph_subject(module))
            moves = neighbourhood(target.space)
            print(f"{name}: {len(moves)} single moves, whole and per device", flush=True)
            partitioning = workload.partitioning()
            measured = {mode: screens(module, Placement(mode, partitioning), moves)
                        for mode in MeasureMode}
            cached.write_text(json.dumps(measured))
        whole, per_device = measured[MeasureMode.WHOLE], measured[MeasureMode.PER_DEVICE]
        pairs = [(whole[m], per_device[m]) for m in whole
                 if "speedup" in whole[m] and "speedup" in per_device.get(m, {})]
        rows[name] = fidelity_of(pairs)
        pooled += pairs
    rows["all"] = fidelity_of(pooled)
    return rows


def part_tuning(name: str, budget: int, cache: Path) -> dict[str, Any]:
    cached = cache / f"tuning-{name}-{budget}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    workload = get_sharded(name)
    module = from_lowered(workload.lower(), source=f"zoo:{name}")
    rows = {}
    for mode in MeasureMode:
        placement = Placement(mode, workload.partitioning())
        with tempfile.TemporaryDirectory() as home:
            started = time.monotonic()
            result = tune_module(module, Path(home), TuneSettings(budget_evals=budget), progress=False,
                                 placement=placement)
            minutes = (time.monotonic() - started) / 60
        row = {"minutes": minutes, "accepted": result.accepted, "status": result.status,
               "config": {k: str(v) for k, v in result.config.items()},
               "speedup": result.speedup.estimate if result.speedup else None}
        if result.config:  # what the fleet's whole program gets from the config found
            whole = evaluate_independently(module, result.config, 3, settings=VERIFY_SETTINGS,
                                           partitioning=workload.partitioning())
            row["whole_speedup"] = whole.speedup.estimate if whole.speedup else None
        rows[str(mode)] = row
        print(f"  tuning {name} {mode}: {row}", flush=True)
    cached.write_text(json.dumps(rows))
    return rows


def part_oracle(name: str, budget: int, cache: Path, fidelity_cache: Path) -> dict[str, Any]:
    cached = cache / f"oracle-{name}-{budget}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    workload = get_sharded(name)
    module = from_lowered(workload.lower(), source=f"zoo:{name}")
    partitioning = workload.partitioning()
    screened = json.loads((fidelity_cache / f"fidelity-{name}.json").read_text())["whole"]
    best = sorted((s["speedup"], m) for m, s in screened.items() if "speedup" in s)[-3:]
    verified = []
    for _, move in best:
        flag, _, value = move.partition("=")
        config = _config_of(module, flag, value)
        check = evaluate_independently(module, config, 3, settings=VERIFY_SETTINGS,
                                       partitioning=partitioning)
        verified.append((check.speedup.estimate if check.speedup else 0.0, move))
    oracle_speedup, oracle_move = max(verified)
    with tempfile.TemporaryDirectory() as home:
        result = tune_module(module, Path(home), TuneSettings(budget_evals=budget), progress=False,
                             placement=Placement(MeasureMode.WHOLE, partitioning))
    found = result.speedup.estimate if result.accepted and result.speedup else 1.0
    share = math.log(found) / math.log(oracle_speedup) if oracle_speedup > 1 + NOISE else None
    row = {"oracle_move": oracle_move, "oracle_speedup": oracle_speedup, "found": found,
           "found_config": {k: str(v) for k, v in result.config.items()}, "gain_share": share}
    cached.write_text(json.dumps(row))
    return row


def _config_of(module: HloModule, flag: str, value: str) -> CompilerConfig:
    """The one-move config whose text is `flag=value`, as the space holds its value."""
    target = make_target(Kind.GRAPH, graph_subject(module))
    for name, candidate in neighbourhood(target.space):
        if name == flag and str(candidate) == value:
            return {name: candidate}
    raise KeyError(f"{flag}={value} is no move of the space")


def part_job(runs: int, cache: Path) -> dict[str, Any]:
    """The hooked job, its step's config in the store: tuned and holdout arms, alternately."""
    cached = cache / f"job-{runs}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    with tempfile.TemporaryDirectory() as directory:
        home = Path(directory) / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FDO_")}
        env["FDO_HOME"] = str(home)
        fdo = [sys.executable, "-m", "pipelines.cli"]
        job = [sys.executable, str(ROOT / "examples" / "sharded_step.py"), "--steps", "60"]
        subprocess.run([*fdo, "run", "--spool-hlo", "--job-id", "spool", "--", *job], env=env,
                       check=True, cwd=ROOT, capture_output=True)
        step = next(home.glob("spool/symbols/*/*/*jit_train_step.before_optimizations.txt"))
        tuned = json.loads(subprocess.run(
            [*fdo, "tune", str(step), "--budget-evals", "8", "--json"], env=env, check=True,
            cwd=ROOT, capture_output=True, text=True).stdout)
        if not tuned["accepted"]:
            return {"claimed": None, "status": tuned["status"]}
        subprocess.run([*fdo, "deliver"], env=env, check=True, cwd=ROOT, capture_output=True)
        seconds: dict[str, list[float]] = {"tuned": [], "holdout": []}
        for run in range(runs):
            for arm, share in (("tuned", "0"), ("holdout", "1")):
                out = subprocess.run([*fdo, "run", "--holdout", share, "--job-id", f"{arm}-{run}",
                                      "--", *job], env=env, check=True, cwd=ROOT,
                                     capture_output=True, text=True).stdout
                seconds[arm].append(float(out.strip().splitlines()[-1].split()[-1]))
        ratio = statistics.median(seconds["holdout"]) / statistics.median(seconds["tuned"])
        row = {"claimed": tuned["speedup"], "claimed_interval": [tuned["ci_low"], tuned["ci_high"]],
               "config": tuned["config"], "measure_mode": tuned["measure_mode"],
               "job_speedup": ratio, "runs": runs,
               "per_run": [h / t for h, t in zip(seconds["holdout"], seconds["tuned"])]}
    cached.write_text(json.dumps(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="fidelity,tuning,oracle,job")
    parser.add_argument("--workloads", default=",".join(w.name for w in sharded_workloads()))
    parser.add_argument("--tune-workload", default="transformer-tp4")
    parser.add_argument("--budget-evals", type=int, default=12)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    names = args.workloads.split(",")
    report: dict[str, Any] = {}
    if "fidelity" in parts:
        report["fidelity"] = part_fidelity(names, cache)
    if "tuning" in parts:
        report["tuning"] = part_tuning(args.tune_workload, args.budget_evals, cache)
    if "oracle" in parts:
        report["oracle"] = part_oracle(args.tune_workload, args.budget_evals, cache, cache)
    if "job" in parts:
        report["job"] = part_job(args.runs, cache)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    if "fidelity" in report:
        print("\nper device against whole: every single move screened in both modes")
        print(f"{'workload':16} {'moves':>5} {'active':>6} {'spearman':>8} {'median err':>10} "
              f"{'p90 err':>8} {'over p90':>8} {'agree':>6}")
        for name, row in report["fidelity"].items():
            print(f"{name:16} {row['moves']:5d} {row['active']:6d} {row['spearman']:8.2f} "
                  f"{row['median_error']:10.3f} {row['p90_error']:8.3f} {row['over_p90']:8.3f} "
                  f"{row['decisions_agree']:6.2f}")
    for part in ("tuning", "oracle", "job"):
        if part in report:
            print(f"\n{part}: {json.dumps(report[part], indent=1)}")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
