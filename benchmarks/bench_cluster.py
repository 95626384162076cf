"""Tuning tasks on a Ray cluster against the same tasks run here: wall time on one node and on
two, Ray's overhead per task, and whether both find the same configs.

Builds `--tasks` small reduction graphs (sums of narrow rows: moving their reductions off
YNNPACK is a clear gain on jaxlib 0.10.2), then tunes them three times, each run in a fresh
home: here, one after another (the local runner: what `fdo tune` does without `--cluster`); on
a loopback Ray cluster (`ray.cluster_utils.Cluster`) of one measuring node; and of two. It
prints the wall time of each run, the cluster's start-up, the time each run spent outside the
tasks' own phases (search to verification, `TuneResult.phases`) per task, and Ray's overhead per
task: that time of the one-node run (the same tasks, one at a time) less the local run's. A
difference of outside time, not of wall time, because the phases' own time follows the
machine's load. Last, per task, the accepted config of each run.

    python benchmarks/bench_cluster.py [--tasks 8] [--budget-evals 4] [--max-seconds 1] [--json]

Two nodes on one machine share its cores: the measurements of two tasks run side by side and
disturb each other, so what this machine shows of two nodes is the overhead of routing, not
the speed-up of two machines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ray
from provenance import describe
from ray.cluster_utils import Cluster

from execution.measure import MeasureSettings
from hlo.environment import current_environment
from hlo.module import from_lowered
from storage.home_factory import open_home
from tasks.ray_runner import RayRunner
from tasks.records import TaskOutcome, TuneTask
from tasks.resources import node_resources
from tasks.runner import LocalRunner, Runner, run_all
from tuner.space import config_key
from tuner.target import graph_subject
from tuner.tune import TuneSettings
from vocabulary.tuning import Kind

f32 = jax.ShapeDtypeStruct
# (rows, columns, axis) of each graph's sum: narrow rows, where XLA's own reduction beats
# YNNPACK's on jaxlib 0.10.2 (docs/bench_validate.md).
SHAPES = [(16384, 3, -1), (8192, 3, -1), (8192, 8, 0), (12288, 3, -1), (4096, 3, -1),
          (16384, 4, -1), (6144, 3, -1), (8192, 6, 0), (10240, 3, -1), (2048, 3, -1)]


def tasks(count: int, settings: TuneSettings) -> list[TuneTask]:
    """The tuning tasks of the first `count` graphs, in this machine's environment."""
    here = current_environment().key()
    made = []
    for rows, columns, axis in SHAPES[:count]:
        label = f"sum({rows}x{columns}, {axis})"
        lowered = jax.jit(lambda x, axis=axis: x.sum(axis)).lower(f32((rows, columns), jnp.float32))
        made.append(TuneTask.of(Kind.GRAPH, label, graph_subject(from_lowered(lowered, source=label)),
                                here, settings))
    return made


def timed(runner: Runner, work: list[TuneTask], home: Path) -> tuple[float, list[TaskOutcome]]:
    started = time.perf_counter()
    outcomes = run_all(runner, work, open_home(home))
    return time.perf_counter() - started, outcomes


def on_cluster(nodes: int, work: list[TuneTask], home: Path) -> dict[str, Any]:
    """The tasks on a fresh loopback cluster of `nodes` measuring nodes (the head one of them)."""
    offer = node_resources(current_environment())
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "resources": offer, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources=offer)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    startup = time.perf_counter() - started
    try:
        seconds, outcomes = timed(RayRunner(cluster.address), work, home)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {"startup": startup, "seconds": seconds, "outcomes": outcomes}


def in_task(outcome: TaskOutcome) -> float:
    """The seconds a task spent in its own phases, search to verification."""
    return sum(p.seconds for p in outcome.result.phases) if outcome.result is not None else 0.0


def accepted(outcome: TaskOutcome) -> str | None:
    result = outcome.result
    return config_key(result.config) if result is not None and result.accepted else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--budget-evals", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=1.0,
                        help="each measurement's budget (search, comparisons and verification)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.tasks <= len(SHAPES):
        parser.error(f"--tasks {args.tasks}: between 1 and {len(SHAPES)}")
    short = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=60, max_seconds=args.max_seconds)
    settings = TuneSettings(budget_evals=args.budget_evals, search=short, compare=short,
                            verify=replace(short, confidence=0.999, min_pairs=20), verify_workers=1)
    work = tasks(args.tasks, settings)
    with tempfile.TemporaryDirectory() as scratch:
        local_seconds, local = timed(LocalRunner(), work, Path(scratch) / "local")
        one = on_cluster(1, work, Path(scratch) / "one")
        two = on_cluster(2, work, Path(scratch) / "two")
    runs = {"local": local, "1 node": one["outcomes"], "2 nodes": two["outcomes"]}
    seconds = {"local": local_seconds, "1 node": one["seconds"], "2 nodes": two["seconds"]}
    outside = {name: (seconds[name] - sum(in_task(o) for o in runs[name])) / args.tasks
               for name in ("local", "1 node")}
    figures = {
        "tasks": args.tasks, "budget_evals": args.budget_evals, "max_seconds": args.max_seconds,
        "seconds": seconds,
        "task_seconds": {name: sum(in_task(o) for o in outcomes) for name, outcomes in runs.items()},
        "startup_seconds": {"1 node": one["startup"], "2 nodes": two["startup"]},
        "outside_per_task": outside,
        "overhead_per_task": outside["1 node"] - outside["local"],
        "accepted": {task.label: {name: accepted(outcomes[i]) for name, outcomes in runs.items()}
                     for i, task in enumerate(work)},
        "nodes_used": sorted({o.node[:12] for o in two["outcomes"] if o.node}),
    }
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{args.tasks} tasks, {args.budget_evals} evaluations each, "
          f"{args.max_seconds} s a measurement")
    for name, wall in seconds.items():
        startup = figures["startup_seconds"].get(name)
        extra = f" (cluster start-up {startup:.1f} s more)" if startup is not None else ""
        print(f"  {name:8} {wall:6.1f} s, {figures['task_seconds'][name]:6.1f} s in the tasks' "
              f"phases{extra}")
    print(f"  outside the phases per task: local {outside['local']:.2f} s, 1 node "
          f"{outside['1 node']:.2f} s; Ray's overhead per task {figures['overhead_per_task']:+.2f} s")
    print(f"  two-node run used nodes {', '.join(figures['nodes_used'])}")
    for label, by_run in figures["accepted"].items():
        same = "same" if len(set(by_run.values())) == 1 else "DIFFERENT"
        print(f"  {label:20} {same}: " + "; ".join(f"{k}: {v or 'none'}" for k, v in by_run.items()))


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
