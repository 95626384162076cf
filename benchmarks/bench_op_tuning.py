"""Op-level tuning on a simulated fleet, end to end: which ops get faster, and what folding their
winners does to whole graphs.

Simulates a small fleet of the named zoo workloads (real dumps and real per-op profiles), ranks
it, tunes the top `--top` op candidates this machine can measure (exhaustive op spaces, default
measurement settings), folds the winners into each graph that holds them, and then measures each
folded config on its graph once more, side by side with the fold's own figure. Prints one row
per op and per graph: speedup (median of per-pair ratios) with its interval.

    python benchmarks/bench_op_tuning.py [--workloads cnn-m,unet-s] [--top 8] [--home DIR]
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

from provenance import describe

from execution.evaluate import evaluate
from hlo.module import from_text
from ingest.tables import GRAPHS
from ranking.rank import RankSettings, rank
from storage.blobs import BlobStore
from storage.warehouse import Warehouse
from tuner.candidates import tunable_op_candidates
from tuner.fold import fold_graph, graphs_holding
from tuner.result import TuneResult
from tuner.task import tune
from tuner.tune import VERIFY_SETTINGS, TuneSettings
from vocabulary.tuning import Kind
from workloads.simulator.run import simulate


def _figure(result: TuneResult) -> str:
    if result.speedup is None:
        return f"{'-':>24}"
    return f"{result.speedup.estimate:6.3f}x [{result.speedup.low:.3f}, {result.speedup.high:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cnn-m,unet-s")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="fdo-bench-op-"))
    if not (home / "warehouse" / "candidates").exists():
        simulate(home, days=2, jobs=300, workloads=args.workloads.split(","), progress=True)
        rank(home, RankSettings(date=datetime.date.today(), top_k=4 * args.top))
    found = tunable_op_candidates(home, args.top)
    settings = TuneSettings(budget_evals=200, strategy="exhaustive")
    print(f"{'op':<44} {'class':<12} {'configs':>7} {'speedup [99.9% interval]':>26}  status")
    graphs = set()
    for candidate in found.tunable:
        op, env_key = candidate.subject, candidate.env_key
        result = tune(Kind.OP, op, home, settings, env_key=env_key, progress=True)
        print(f"{candidate.label[:44]:<44} {op.op_class:<12} {len(result.trials) + 1:>7} "
              f"{_figure(result):>26}  {result.status}")
        graphs.update((g, env_key) for g in graphs_holding(home, [op.fingerprint], env_key))
    rows = {(g["fingerprint"], g["env_key"]): g for g in Warehouse(home).read(GRAPHS).to_pylist()}
    print(f"\n{'graph':<34} {'ops':>4} {'fold (99.9%)':>26} {'re-measured (99.9%)':>26}  config")
    for graph, env_key in sorted(graphs):
        fold = fold_graph(home, graph, env_key)
        if fold is None:
            print(f"{rows[graph, env_key]['module_name'][:22]:<22} {graph[:10]}  nothing to fold")
            continue
        module = from_text(BlobStore(home).get_text(rows[graph, env_key]["hlo_blob"]))
        check = evaluate(module, fold.config, settings=VERIFY_SETTINGS, seed=7)
        again = (f"{check.speedup.estimate:6.3f}x [{check.speedup.low:.3f}, {check.speedup.high:.3f}]"
                 if check.speedup is not None else check.error)
        print(f"{rows[graph, env_key]['module_name'][:22]:<22} {graph[:10]} {len(fold.sources):>4} "
              f"{_figure(fold):>26} {again:>26}  {fold.config}")
    print(f"\nhome: {home}")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
