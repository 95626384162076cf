"""Ranking 10 million graph_runs rows: the Beam pipeline and the DuckDB reference side by side.

Simulates one day of a large fleet (about `--rows` graph runs; skipped when `--home` already
holds one), then runs the Beam ranking (the default runner, in-process in multi-process mode,
and the same runner in one process) and the DuckDB SQL reference in turn, `--repeats` times
each, and prints the median times and their ratios. Target: Beam within 3x of DuckDB.

    python benchmarks/bench_rank.py [--rows 10000000] [--repeats 3] [--home DIR]
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ingest.tables import GRAPH_RUNS
from ingest.warehouse import Warehouse
from ranking.rank import RankSettings, rank
from ranking.reference import reference_rank
from ranking.store_snapshot import live_entries

DAY = datetime.date(2026, 6, 2)
BEAM_MODES = {
    "Beam, default (multi-process, 2 workers)": [],
    "Beam, in-process (--direct_running_mode=in_memory)": ["--direct_running_mode=in_memory",
                                                           "--direct_num_workers=1"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--home", type=Path, help="a home with a simulated day (default: make one)")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="fdo-rank-"))
    if not Warehouse(home).files(GRAPH_RUNS):
        print(f"simulating one day of about {args.rows:,} graph runs under {home}...", flush=True)
        subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), "simulate",
                        "--days", "1", "--jobs", str(args.rows), "--start", DAY.isoformat(),
                        "--op-sample", "0.01", "--json"], check=True, stdout=subprocess.DEVNULL)
    rows = Warehouse(home).read(GRAPH_RUNS, ["job_id"]).num_rows
    settings = RankSettings(date=DAY, window_days=1)
    tuned = live_entries(home)
    times: dict[str, list[float]] = {name: [] for name in (*BEAM_MODES, "DuckDB reference")}
    for _ in range(args.repeats):
        for name, beam_args in BEAM_MODES.items():
            started = time.perf_counter()
            candidates, _ = rank(home, settings, beam_args)
            times[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        reference, _ = reference_rank(home, settings, tuned)
        times["DuckDB reference"].append(time.perf_counter() - started)
        assert candidates.num_rows == reference.num_rows
    duckdb_s = statistics.median(times["DuckDB reference"])
    print(f"ranking {rows:,} graph_runs rows (+ op_runs), median of {args.repeats}:")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"  {name:<38} {median:6.1f} s {rows / median:>12,.0f} rows/s  "
              f"{median / duckdb_s:5.2f}x DuckDB")
    print("  target: Beam within 3x of DuckDB")
    if args.home is None:
        shutil.rmtree(home)


if __name__ == "__main__":
    main()
