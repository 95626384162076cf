"""Ranking 10 million graph_runs rows: the Beam pipeline and the DuckDB reference side by side.

Simulates one day of a large fleet (about `--rows` graph runs; skipped when `--home` already
holds one), then runs the Beam ranking (the default runner, in-process in multi-process mode
with the workers it sizes for the rows; the same with one worker per core; the same runner in
one process) and the DuckDB SQL reference in turn, `--repeats` rounds, and prints the median
times and their ratios. Target: Beam within 3x of DuckDB.

Also timed in the same rounds: Beam's fixed cost, a pipeline of the ranking's shape (a Create
spread over the workers, a lifted combine per key, a map) with no data, on the default runner:
what no amount of faster reading or summing can remove.

    python benchmarks/bench_rank.py [--rows 10000000] [--repeats 3] [--home DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from provenance import describe

from ingest.tables import GRAPH_RUNS
from ranking.rank import RankSettings, rank, rank_reads
from ranking.reference import reference_rank
from storage.beam_runner import default_workers, pipeline_options
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse

DAY = datetime.date(2026, 6, 2)
CORES = len(os.sched_getaffinity(0))
ROWS_PER_JOB = 3.2  # graph_runs rows per job and day in the simulated fleet (as bench_ingest_scale.py)


def beam_modes(rows: int) -> dict[str, list[str]]:
    """The runner setups timed: the default, one worker per core, and one process."""
    return {
        f"Beam, default (multi-process, {default_workers(rows)} worker(s) for {rows:,} rows)": [],
        f"Beam, multi-process, one worker per core ({CORES})": [f"--direct_num_workers={CORES}"],
        "Beam, in-process (--direct_running_mode=in_memory)": ["--direct_running_mode=in_memory",
                                                               "--direct_num_workers=1"],
    }


def empty_pipeline() -> None:
    """The default runner's fixed cost: the ranking's stages, no data."""
    with beam.Pipeline(options=pipeline_options()) as pipeline:
        (pipeline
         | beam.Create([("graph", 0.0), ("op", 0.0)])
         | beam.CombinePerKey(sum)
         | beam.Map(lambda summed: summed))


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
                        "--days", "1", "--jobs", str(round(args.rows / ROWS_PER_JOB)), "--start", DAY.isoformat(),
                        "--op-sample", "0.01", "--json"], check=True, stdout=subprocess.DEVNULL)
    rows = Warehouse(home).read(GRAPH_RUNS, ["job_id"]).num_rows
    settings = RankSettings(date=DAY, window_days=1)
    tuned = StoreReader(home).live_entries()
    modes = beam_modes(rank_reads(home, settings).rows)
    fixed = "Beam fixed cost (default runner, no data)"
    times: dict[str, list[float]] = {name: [] for name in (*modes, fixed, "DuckDB reference")}
    for _ in range(args.repeats):
        started = time.perf_counter()
        empty_pipeline()
        times[fixed].append(time.perf_counter() - started)
        for name, beam_args in modes.items():
            started = time.perf_counter()
            candidates, _ = rank(home, settings, beam_args)
            times[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        reference, _ = reference_rank(home, settings, tuned)
        times["DuckDB reference"].append(time.perf_counter() - started)
        assert candidates.num_rows == reference.num_rows
    duckdb_s = statistics.median(times["DuckDB reference"])
    print(f"ranking {rows:,} graph_runs rows (+ op_runs), median of {args.repeats} rounds; "
          "x DuckDB: ratio of medians [median of the rounds' own ratios]:")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        per_round = statistics.median(b / d for b, d in zip(seconds, times["DuckDB reference"]))
        rate = "" if name == fixed else f"{rows / median:,.0f} rows/s"
        print(f"  {name:<66} {median:6.1f} s {rate:>16}  {median / duckdb_s:5.2f}x [{per_round:5.2f}x]")
    print("  target: Beam within 3x of DuckDB")
    if args.home is None:
        shutil.rmtree(home)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
