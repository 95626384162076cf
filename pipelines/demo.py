"""`make demo`: what the foundation does today, end to end on the workload zoo.

Dumps zoo programs with XLA's own dumper, fingerprints each dump and checks that JAX's
compile-time module gets the same fingerprint, lists the kernels (op fingerprints) of the
optimized modules, then evaluates a few compiler configs against the default with paired timing
and the numeric check; then simulates a small fleet for a few days and ingests its dumps and
profile drops into the warehouse, and ranks what the fleet spends. Later stages (ranking, tuning, delivery, validation) plug in here.
"""

from __future__ import annotations

import datetime
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

from ingest import zoo
from ingest.fingerprint import fingerprint_module, graph_fingerprint
from ingest.hlo_module import from_lowered, load_file
from ingest.zoo.dump import dump_workloads
from pipelines.cli import default_home, print_ranking, print_simulation
from pipelines.simulator.run import simulate
from ranking.rank import RankSettings, rank
from tuner.evaluate import evaluate
from tuner.measure import MeasureSettings
from tuner.worker import Worker

_EVALUATIONS = (
    ("mlp-s", {}),
    ("cnn-s", {"xla_cpu_experimental_ynn_fusion_type": ("INDIVIDUAL_DOT", "REDUCE")}),
    ("gnn-s", {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}),
    ("unet-s", {"xla_backend_optimization_level": 0}),
)


_FLEET_DAYS = 5
_FLEET_JOBS = 5000
_FLEET_WORKLOADS = ["transformer-s", "mlp-s", "cnn-s", "gnn-s", "recommender-s"]


def main() -> int:
    """Run the demo and print its summary."""
    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    workloads = zoo.all_workloads()
    print(f"fleet-fdo demo: {len(workloads)} zoo workloads, data root {home}")
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        dirs = dump_workloads(Path(tmp), progress=True)
        rows = []
        for workload, directory in tqdm(list(zip(workloads, dirs)), desc="fingerprint", unit="wl"):
            before = load_file(next(directory.glob("*.before_optimizations.txt")))
            after = load_file(next(directory.glob("*after_optimizations.txt")))
            from_jax = graph_fingerprint(from_lowered(workload.lower()))
            graph = fingerprint_module(before, with_ops=False)
            optimized = fingerprint_module(after)
            rows.append((workload.name, graph.fingerprint, graph.n_instructions,
                         len(optimized.ops), graph.fingerprint == from_jax))
    print(f"\n{'workload':<18} {'graph fingerprint':<34} {'instr':>6} {'kernels':>7}  dump==jax")
    for name, fingerprint, n, kernels, same in rows:
        print(f"{name:<18} {fingerprint:<34} {n:>6} {kernels:>7}  {'yes' if same else 'NO'}")
    mismatches = sum(1 for row in rows if not row[4])

    print("\nevaluating configs (paired, interleaved; 99% order-statistic interval):")
    worker = Worker()
    try:
        for name, config in _EVALUATIONS:
            module = from_lowered(zoo.get(name).lower(), source=name)
            result = evaluate(module, config, settings=MeasureSettings(max_seconds=10), worker=worker)
            label = ", ".join(f"{k}={v}" for k, v in config.items()) or "A/A"
            if result.error:
                print(f"  {name:<10} {label}: failed: {result.error}")
                continue
            print(f"  {name:<10} {label}: {result.speedup:.3f}x "
                  f"[{result.ci_low:.3f}, {result.ci_high:.3f}] numerics "
                  f"{'ok' if result.numerics_ok else 'FAILED'}")
    finally:
        worker.close()
    print(f"\nsimulating a fleet for {_FLEET_DAYS} days and ingesting what it hands over:")
    report = simulate(home, days=_FLEET_DAYS, jobs=_FLEET_JOBS, seed=0, workloads=_FLEET_WORKLOADS,
                      progress=True)
    print_simulation(report)
    print("\nranking the fleet's graphs and ops by chip-seconds (Beam):")
    candidates, coverage = rank(home, RankSettings(date=datetime.date.today(), top_k=5))
    print_ranking(candidates, coverage)
    print(f"\n{len(rows) - mismatches}/{len(rows)} dumps fingerprint the same as JAX's modules; "
          f"warehouse under {home / 'warehouse'}")
    return 0 if mismatches == 0 and not report.quarantined else 1


if __name__ == "__main__":
    sys.exit(main())
