"""Scale of the simulate + ingest path: one day of a large fleet, 10 million graph_runs rows.

Runs, each in its own `fdo` process so that its peak memory is its own:
1. `fdo simulate --days 1` for a fleet sized to give about `--rows` graph runs (the compiled
   catalog is built beforehand and not timed);
2. `fdo ingest profiles` of that day's drops into a fresh home (ingestion alone);
and prints seconds, rows/s and peak resident memory of each, the Parquet files written and
their sizes, and a DuckDB count over the partitions. Targets: under 10 minutes, under 4 GiB.

    python benchmarks/bench_ingest_scale.py [--rows 10000000] [--op-sample 0.01] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from provenance import describe

# graph_runs rows per job and day in the simulated fleet (measured: 3.19; a row per profiled process)
ROWS_PER_JOB = 3.2


def run_fdo(home: Path, *args: str) -> tuple[float, float, str]:
    """Seconds, peak RSS in GiB, and stdout of one `fdo` process."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"fdo {' '.join(args)} failed with {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - started, usage.ru_maxrss / (1 << 20), output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--op-sample", type=float, default=0.01)
    parser.add_argument("--home", type=Path, help="keep the data here (default: a temporary dir)")
    args = parser.parse_args()
    root = args.home or Path(tempfile.mkdtemp(prefix="fdo-scale-"))
    home, fresh = root / "home", root / "fresh"
    jobs = int(args.rows / ROWS_PER_JOB)
    print(f"building the fleet's compiled catalog under {home} (not timed)...", flush=True)
    run_fdo(home, "simulate", "--days", "1", "--jobs", "10", "--start", "2026-06-01", "--json")

    seconds, peak, output = run_fdo(home, "simulate", "--days", "1", "--jobs", str(jobs),
                                    "--start", "2026-06-02", "--op-sample", str(args.op_sample), "--json")
    report = json.loads(output)
    rows = report["graph_runs"]
    print(f"simulate + ingest, 1 day, {jobs} jobs: {rows} graph_runs + {report['op_runs']} op_runs rows, "
          f"{report['symbol_modules']} symbol modules")
    print(f"  {seconds:.0f} s, {rows / seconds:,.0f} graph_runs rows/s, peak {peak:.2f} GiB"
          f"   (targets: < 600 s, < 4 GiB)")

    drops = sorted((home / "fleet" / "profiles" / "2026-06-02").glob("*.parquet"))
    seconds, peak, output = run_fdo(fresh, "ingest", "profiles", *map(str, drops), "--json")
    landed = json.loads(output)
    print(f"ingest profiles alone: {landed['graph_runs']} rows in {seconds:.0f} s, "
          f"{landed['graph_runs'] / seconds:,.0f} rows/s, peak {peak:.2f} GiB")

    files = sorted((home / "warehouse" / "graph_runs").rglob("*.parquet"))
    sizes = [f.stat().st_size / (1 << 20) for f in files]
    print(f"graph_runs: {len(files)} Parquet files, {min(sizes):.1f} .. {max(sizes):.1f} MiB")
    pattern = f"{home}/warehouse/graph_runs/*/*.parquet"
    count = duckdb.sql(f"select count(*) from read_parquet('{pattern}', hive_partitioning = true) "
                       "where dt = '2026-06-02'").fetchone()[0]
    print(f"DuckDB with hive partitioning counts {count} rows for 2026-06-02")
    if args.home is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
