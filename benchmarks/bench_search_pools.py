"""The tuner's compile pool and execute worker: throughput and noise, side by side in one run.

The same list of configs (one-flag configs of the graph space and random pairs, every one
compiled and, unless its program is known, measured with the tuner's screening settings) is
evaluated on zoo graphs under two core plans, alternating, `--repeats` times each:

- split (the tuner's default, `execution.cores.plan_cores`): compile workers on their own cores,
  working ahead while the execute worker measures on the others;
- turns: one compile worker and the execute worker on all cores, taking turns (nothing compiles
  while a measurement runs; the way the tuner worked before the pools).

Prints per graph and plan: medians of wall time, evaluations per hour, the share of compile
time hidden behind measurements, the median relative half-width of the measured intervals, and
how far the two plans' speedups agree (median |log ratio| over configs measured by both).

    python benchmarks/bench_search_pools.py [--graphs cnn-s,mlp-s] [--configs 16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

from provenance import describe

from execution.compile import compiler_defaults
from execution.cores import CorePlan, available_cores, plan_cores
from execution.flags import CompilerConfig
from execution.session import Span
from hlo.module import from_lowered
from tuner.search import search
from tuner.space import accepted_flags, config_key, graph_space
from tuner.strategies import random_config
from tuner.trial import Trial
from tuner.tune import SEARCH_SETTINGS
from tuner.worker_evaluator import WorkerEvaluator
from workloads import zoo


def config_list(count: int, seed: int = 0) -> list[CompilerConfig]:
    """One-flag configs of the graph space, then random ones, `count` distinct in all."""
    space = graph_space("cpu", accepted_flags("cpu"), compiler_defaults())
    configs = {config_key(c): c for c in ({p.name: v} for p in space.params for v in p.values[:1])}
    rng = random.Random(seed)
    while len(configs) < count * 2:
        config = random_config(space, rng)
        configs.setdefault(config_key(config), config)
    return list(configs.values())[:count]


def hidden_share(timeline: list[Span]) -> float:
    """The share of compile seconds that ran while a measurement ran."""
    compiles = [s for s in timeline if s.kind == "compile"]
    measures = [s for s in timeline if s.kind == "measure"]
    total = sum(c.ended - c.started for c in compiles)
    hidden = sum(max(0.0, min(c.ended, m.ended) - max(c.started, m.started))
                 for c in compiles for m in measures)
    return hidden / total if total else 0.0


def run_plan(module_proto: bytes, configs: list[CompilerConfig], plan: CorePlan
             ) -> tuple[float, list[Trial], list[Span]]:
    """Evaluate `configs` in order under `plan`; the wall seconds (the default's compile and
    the workers' start included), the trials and the workers' timeline."""
    listed = iter(configs)
    trials: list[Trial] = []
    started = time.perf_counter()
    with WorkerEvaluator(module_proto, 0, plan) as evaluator:
        search(evaluator, lambda done, pending: next(listed, None), trials, len(configs),
               SEARCH_SETTINGS, lambda: True, lambda t: None)
    return time.perf_counter() - started, trials, evaluator.timeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="cnn-s,mlp-s")
    parser.add_argument("--configs", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cores = available_cores()
    plans = {"split": plan_cores(), "turns": CorePlan(cores, cores, 1)}
    split = plans["split"]
    print(f"cores {sorted(cores)}: split = measure on {sorted(split.execute)}, compile on "
          f"{sorted(split.compile)} ({split.compile_workers} worker(s)); turns = both on all")
    configs = config_list(args.configs)
    print(f"{'graph':<8} {'plan':<6} {'wall s':>7} {'evals/h':>8} {'hidden':>7} "
          f"{'half-width':>10} {'measured':>8}")
    for graph in args.graphs.split(","):
        module = from_lowered(zoo.get(graph).lower(), source=f"zoo:{graph}")
        walls: dict[str, list[float]] = {name: [] for name in plans}
        hidden: dict[str, list[float]] = {name: [] for name in plans}
        widths: dict[str, list[float]] = {name: [] for name in plans}
        speedups: dict[str, dict[str, list[float]]] = {name: {} for name in plans}
        measured: dict[str, int] = {}
        for _ in range(args.repeats):
            for name, plan in plans.items():
                wall, trials, timeline = run_plan(module.proto, configs, plan)
                walls[name].append(wall)
                hidden[name].append(hidden_share(timeline))
                done = [t for t in trials if t.outcome == "measured"]
                measured[name] = len(done)
                widths[name] += [(t.speedup.high - t.speedup.low) / 2 / t.speedup.estimate
                                 for t in done]
                for t in done:
                    speedups[name].setdefault(config_key(t.config), []).append(t.speedup.estimate)
        for name in plans:
            wall = statistics.median(walls[name])
            print(f"{graph:<8} {name:<6} {wall:>7.1f} {3600 * len(configs) / wall:>8.0f} "
                  f"{statistics.median(hidden[name]):>7.0%} "
                  f"{statistics.median(widths[name]) if widths[name] else float('nan'):>10.2%} "
                  f"{measured[name]:>8}")
        common = set(speedups["split"]) & set(speedups["turns"])
        gaps = [abs(math.log(statistics.median(speedups["split"][k])
                             / statistics.median(speedups["turns"][k]))) for k in common]
        ratio = statistics.median(walls["turns"]) / statistics.median(walls["split"])
        print(f"{graph:<8} evals/h split vs turns: {ratio:.2f}x; speedups agree within a median "
              f"{statistics.median(gaps) if gaps else float('nan'):.1%} over {len(common)} configs")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
