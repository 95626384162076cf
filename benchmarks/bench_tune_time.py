"""A task's wall time beside what it verifies: the tuner of another checkout against this one's,
side by side.

    python benchmarks/bench_tune_time.py FILE [FILE ...] --before DIR [--seeds 1] [--json]
        [--before-args "FDO TUNE ARGS"] [--after-args "FDO TUNE ARGS"] [-- FDO TUNE ARGS]

For each module FILE and seed, `fdo tune FILE --json` (its default settings, or the arguments
after `--`; the after run also takes `--after-args`, e.g. "--budget-minutes 8" against the
before run's 40 evaluations, and the before run `--before-args`, e.g. "--no-shipped-prior"
with --before this checkout) runs twice, each in a fresh home and a process of its own: once with the code of
the checkout DIR (on PYTHONPATH: "before", e.g. `git worktree add DIR <commit>` or `git archive
<commit> | tar -x -C DIR`) and once with this one's ("after"), in alternating order from seed to
seed so that a drift in the machine's load falls on both. Per run: the verified speedup and its
interval, whether it was accepted and relaxes no numerics (strict), the minutes in all (the
command's wall time), the minutes into the task when its config was found (`seconds_to_best`),
each phase's seconds, and why its search ended (`search_stop`; none before it was told). Then
the after run's config is timed against the before run's itself, paired and interleaved, the
median of three fresh workers (`execution.evaluate`, the tuner's verification settings): how
much of the old gain the new config keeps, measured directly rather than as the ratio of two
verifications taken minutes apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provenance import describe

import tuner
from execution.compile import compiler_defaults
from execution.evaluate import FRESH_WORKERS, evaluate
from execution.flags import CompilerConfig, on_top_of, relaxes_numerics, trusted_config
from hlo.module import load_file
from tuner.tune import VERIFY_SETTINGS

HERE = Path(tuner.__file__).resolve().parent.parent  # this checkout


@dataclass
class Run:
    """One `fdo tune` of one module with one checkout's code."""

    code: str  # "before" | "after"
    seed: int
    accepted: bool
    strict: bool
    config: CompilerConfig
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    minutes: float
    minutes_to_best: float | None
    search_stop: str | None
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    evaluations: int = 0


def tune(module: Path, root: Path, code: str, seed: int, extra: list[str]) -> Run:
    """`fdo tune module --json` with the code of `root`, in a fresh home."""
    with tempfile.TemporaryDirectory(prefix=f"bench-tune-{code}-") as home:
        environment = {**os.environ, "PYTHONPATH": str(root)}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", home, "tune", str(module),
                               "--json", "--seed", str(seed), *extra], cwd=root, env=environment,
                              capture_output=True, text=True)
        minutes = (time.perf_counter() - started) / 60
    if done.returncode not in (0, 4):
        raise RuntimeError(f"fdo tune ({code}) exited {done.returncode}: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    config = trusted_config(result["config"])
    seconds = result.get("seconds_to_best")
    return Run(code, seed, result["accepted"], not relaxes_numerics(config), config, result["speedup"],
               result["ci_low"], result["ci_high"], minutes, seconds / 60 if seconds is not None else None,
               result.get("search_stop"), {p["phase"]: p["seconds"] for p in result.get("phases", [])},
               result["evaluations"])


def versus(module: Path, new: CompilerConfig, old: CompilerConfig) -> float | None:
    """`new`'s speedup over `old`, the median of FRESH_WORKERS paired measurements (1 where
    they are the same config; None where the change cannot be written or a measurement
    failed)."""
    if new == old:
        return 1.0
    change = on_top_of(new, old, compiler_defaults())
    if change is None:
        return None
    hlo = load_file(module)
    figures = []
    for seed in range(1, 1 + FRESH_WORKERS):
        result = evaluate(hlo, change, default=old, settings=VERIFY_SETTINGS, seed=seed)
        if result.speedup is None or not result.numerics_ok:
            return None
        figures.append(result.speedup.estimate)
    return statistics.median(figures)


def bench(modules: list[Path], before: Path, seeds: int, extra: list[str], before_extra: list[str],
          after_extra: list[str]) -> list[dict[str, Any]]:
    rows = []
    for module in modules:
        for seed in range(seeds):
            order = [("before", before, extra + before_extra), ("after", HERE, extra + after_extra)]
            runs = {code: tune(module, root, code, seed, given)
                    for code, root, given in (order if seed % 2 == 0 else order[::-1])}
            old, new = runs["before"], runs["after"]
            ratio = versus(module, new.config, old.config) if old.accepted and new.accepted else None
            rows.append({"module": module.name, "seed": seed, "before": asdict(old), "after": asdict(new),
                         "after_over_before": ratio,
                         "time_ratio": new.minutes / old.minutes if old.minutes else None})
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(f"\n{row['module']} (seed {row['seed']}):")
        print(f"  {'code':<7} {'verdict':<9} {'speedup':>8} {'interval':>17} {'min':>6} {'found':>6} "
              f"{'search':>7} {'race':>6} {'prune':>6} {'verify':>7} {'evals':>5}  ended   config")
        for code in ("before", "after"):
            run = row[code]
            interval = (f"[{run['ci_low']:.3f}, {run['ci_high']:.3f}]" if run["ci_low"] is not None else "-")
            verdict = ("strict" if run["strict"] else "relaxed") if run["accepted"] else "no gain"
            found = f"{run['minutes_to_best']:.1f}" if run["minutes_to_best"] is not None else "-"
            phases = run["phases"]
            print(f"  {code:<7} {verdict:<9} {run['speedup'] or 0:>7.3f}x {interval:>17} {run['minutes']:>6.1f} "
                  f"{found:>6} " + " ".join(f"{phases.get(p, 0.0):>{w}.0f}" for p, w in
                                              (("search", 7), ("race", 6), ("prune", 6), ("verify", 7)))
                  + f" {run['evaluations']:>5}  {run['search_stop'] or '-':<7} {json.dumps(run['config'])}")
        ratio = row["after_over_before"]
        print(f"  after / before: time {row['time_ratio']:.2f}x; the after config against the before "
              f"config: " + (f"{ratio:.3f}x" if ratio is not None else "not measured (one accepted nothing)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="HLO modules to tune")
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the code to compare with (its root: pipelines/, tuner/, ...)")
    parser.add_argument("--seeds", type=int, default=1, help="runs of each module and code")
    parser.add_argument("--json", action="store_true", help="machine-readable results")
    parser.add_argument("--after-args", default="", metavar="ARGS",
                        help="more `fdo tune` arguments for the after run alone, as one string")
    parser.add_argument("--before-args", default="", metavar="ARGS",
                        help="more `fdo tune` arguments for the before run alone, as one string "
                        "(with --before this checkout: one setting against another)")
    args, extra = parser.parse_known_args()
    if not (args.before / "tuner" / "tune.py").exists():
        parser.error(f"--before {args.before}: no checkout of this project there (no tuner/tune.py)")
    rows = bench([f.resolve() for f in args.files], args.before.resolve(), args.seeds,
                 [a for a in extra if a != "--"], shlex.split(args.before_args), shlex.split(args.after_args))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_rows(rows)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
