"""How honest `evaluate` is: the A/A false-positive rate and the smallest speedup it detects.

Part 1 runs `evaluate(module, {})` (default against itself, both compiled and measured) on
mixed zoo workloads in one reused sandbox worker, and counts how often the interval claims a
gain (ci_low above 1 + noise band: what the tuner would accept) and how often it excludes 1.0.

Part 2 injects a known speedup: the same compiled executable runs as both sides, and the
"default" side also spins for (s - 1) x the executable's median time after each execution,
so the true ratio is s. It reports the share of trials in which the measurement is
significant, per s; the smallest s detected in at least 90% of trials is the figure we quote.

    python benchmarks/bench_evaluate.py [--pairs 100] [--trials 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from provenance import describe
from tqdm import tqdm

from execution.evaluate import evaluate
from execution.measure import MeasureSettings, measure_pair
from execution.worker import Worker
from hlo.module import from_lowered
from workloads import zoo

INJECTED = (1.01, 1.02, 1.03, 1.05, 1.10)
RELIABLE = 0.9


def aa_false_positives(modules: list[tuple[str, Any]], pairs: int, settings: MeasureSettings) -> dict:
    """Evaluate `pairs` A/A checks round-robin over the modules in one reused worker."""
    claimed_gain = excluded_one = failed = 0
    half_widths: list[float] = []
    rows = []
    with Worker() as worker:
        for i in tqdm(range(pairs), desc="A/A pairs", unit="pair"):
            name, module = modules[i % len(modules)]
            result = evaluate(module, {}, settings=settings, worker=worker, seed=i)
            if result.error or result.speedup is None:
                failed += 1
                continue
            claimed_gain += result.significant
            interval = result.speedup
            excluded_one += not (interval.low <= 1.0 <= interval.high)
            half_widths.append((interval.high - interval.low) / 2.0)
            rows.append((name, interval.estimate, interval.low, interval.high, result.pairs))
    done = pairs - failed
    return {
        "pairs": pairs,
        "failed": failed,
        "false_gain_rate": claimed_gain / max(done, 1),
        "excludes_one_rate": excluded_one / max(done, 1),
        "median_half_width": statistics.median(half_widths) if half_widths else None,
        "worst": sorted(rows, key=lambda r: abs(r[1] - 1.0))[-3:],
    }


def injected_detection(modules: list[tuple[str, Any]], trials: int, settings: MeasureSettings) -> dict:
    """Share of trials in which a known injected speedup is measured as significant."""
    import jax

    from execution.compile import compile_module
    from execution.inputs import make_inputs, parameter_specs
    from execution.session import timed_runner

    rates: dict[str, float] = {}
    progress = tqdm(total=len(INJECTED) * trials, desc="injected speedups", unit="trial")
    compiled = {}
    for speedup in INJECTED:
        detected = 0
        for trial in range(trials):
            name, module = modules[trial % len(modules)]
            if name not in compiled:
                executable = compile_module(module.proto, {}).executable
                arguments = [jax.device_put(a) for a in make_inputs(parameter_specs(module), 0)]
                run = timed_runner(executable, arguments)
                base = statistics.median(run(1) for _ in range(20))
                compiled[name] = (run, base)
            run, base = compiled[name]
            detected += measure_pair(_padded(run, base * (speedup - 1.0)), run, settings).significant
            progress.update()
        rates[f"{speedup:.2f}"] = detected / trials
    progress.close()
    # Reliable from s on: detected in >= RELIABLE of trials at s and at every larger s.
    reliable = None
    for speedup in sorted(INJECTED, reverse=True):
        if rates[f"{speedup:.2f}"] < RELIABLE:
            break
        reliable = speedup
    return {"trials_per_speedup": trials, "detection_rate": rates, "smallest_reliable": reliable}


def _padded(run, pad_seconds: float):
    def padded(repeats: int) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            run(1)
            spin_until = time.perf_counter() + pad_seconds
            while time.perf_counter() < spin_until:
                pass
        return time.perf_counter() - started

    return padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = MeasureSettings()
    modules = [(w.name, from_lowered(w.lower())) for w in zoo.all_workloads()]
    report = {
        "settings": {"confidence": settings.confidence, "noise_band": settings.noise_band,
                     "max_seconds": settings.max_seconds},
        "aa": aa_false_positives(modules, args.pairs, settings),
        "injected": injected_detection(modules, args.trials, settings),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    aa, injected = report["aa"], report["injected"]
    print(f"A/A pairs: {aa['pairs']} on {len(modules)} zoo workloads ({aa['failed']} failed)")
    print(f"  false gain (ci_low > 1 + {settings.noise_band}): {aa['false_gain_rate']:.1%}"
          "   target < 1%")
    print(f"  interval excludes 1.0: {aa['excludes_one_rate']:.1%}"
          f"   median half width {aa['median_half_width']:.4f}")
    for name, speedup, low, high, pairs in aa["worst"]:
        print(f"  furthest from 1: {name} {speedup:.3f} [{low:.3f}, {high:.3f}] {pairs} pairs")
    print(f"injected speedups, {injected['trials_per_speedup']} trials each: detection rate")
    for speedup, rate in injected["detection_rate"].items():
        print(f"  {speedup}x: {rate:.0%}")
    print(f"smallest speedup detected in >= {RELIABLE:.0%} of trials (and every larger one): "
          f"{injected['smallest_reliable']}")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
