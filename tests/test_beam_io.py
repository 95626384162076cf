"""The Beam plumbing under ranking and savings: reads and writes of real Parquet through
Beam's FileSystems, and the vectorized sums' partials across row groups and the coder."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from ranking.beam_io import (ROWS_PER_WORKER, ArrowSum, ArrowTablesCoder, ReadTables, Source, TaggedSums,
                             default_workers, pipeline_options, plan_reads)
from ranking.tables import COVERAGE
from storage.warehouse import Warehouse

_SCHEMA = pa.schema([("key", pa.string()), ("flag", pa.bool_()), ("value", pa.float64())])


def _rows(seed: int, n: int) -> pa.Table:
    keys = [f"k{(i * 7 + seed) % 13}" for i in range(n)]
    return pa.table({"key": keys, "flag": [i % 3 == 0 for i in range(n)],
                     "value": [float(i * seed % 11) / 3 for i in range(n)]}, _SCHEMA)


def _expected(tables: list[pa.Table]) -> dict[tuple[str, bool], float]:
    whole = pa.concat_tables(tables).group_by(["key", "flag"]).aggregate([("value", "sum")])
    return {(r["key"], r["flag"]): r["value_sum"] for r in whole.to_pylist()}


def test_arrow_sum_merges_partials_of_differing_dictionaries_through_its_coder():
    fn = ArrowSum(["key", "flag"], ["value"], _SCHEMA)
    tables = [_rows(seed, 200 + seed) for seed in range(1, 40)]
    coder = fn.get_accumulator_coder()
    accumulators = []
    for part in (tables[:17], tables[17:30], tables[30:], []):
        accumulator = fn.create_accumulator()
        for table in part:
            # As read from Parquet: each row group with a dictionary of its own.
            encoded = table.set_column(0, "key", table.column("key").dictionary_encode())
            accumulator = fn.add_input(accumulator, encoded)
        accumulators.append(coder.decode(coder.encode(fn.compact(accumulator))))
    out = fn.extract_output(fn.merge_accumulators(accumulators))
    assert out.schema == _SCHEMA
    got = {(r["key"], r["flag"]): r["value"] for r in out.to_pylist()}
    want = _expected(tables)
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) <= 1e-9 * abs(want[k]) for k in want)
    assert fn.extract_output(fn.create_accumulator()).equals(_SCHEMA.empty_table())
    assert ArrowTablesCoder().decode(ArrowTablesCoder().encode([])) == []


def test_read_tables_reads_every_row_group_and_stands_in_for_missing_sources(tmp_path):
    tables = [_rows(seed, 500) for seed in (3, 5)]
    files = []
    for index, table in enumerate(tables):
        path = tmp_path / "t" / f"dt=2026-01-0{index + 1}" / "part.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(table, path, row_group_size=120)  # 5 row groups per file
        files.append(str(path))
    fn = ArrowSum(["key", "flag"], ["value"], _SCHEMA)
    sources = [Source("here", files, ["key", "flag", "value", "dt"], fn.reduce),
               Source("nothing", [], ["key", "flag", "value"], fn.reduce, empty=_SCHEMA)]

    def summed(tagged):
        tag, tables = tagged
        return tag, sorted((r["key"], r["flag"], round(r["value"], 9)) for r in tables[tag].to_pylist())

    want = sorted((k, f, round(v, 9)) for (k, f), v in _expected(tables).items())
    with beam.Pipeline(options=pipeline_options(["--direct_running_mode=in_memory",
                                                 "--direct_num_workers=1"])) as pipeline:
        groups = (pipeline
                  | "Read row groups" >> ReadTables(plan_reads([Source("raw", files, ["key", "value", "dt"])]))
                  | beam.MapTuple(lambda tag, table: (table.num_rows, str(table.column("dt")[0]))))
        assert_that(groups, equal_to([(120, d) for d in ("2026-01-01", "2026-01-02") for _ in range(4)]
                                     + [(20, "2026-01-01"), (20, "2026-01-02")]), label="row groups")
        out = (pipeline
               | "Read" >> ReadTables(plan_reads(sources))
               | beam.MapTuple(lambda tag, table: (tag, (tag, table)))
               | beam.CombinePerKey(TaggedSums({"here": fn, "nothing": fn}))
               | beam.Map(summed))
        assert_that(out, equal_to([("here", want), ("nothing", [])]), label="sums")


def test_the_default_runner_gets_a_worker_per_share_of_rows_up_to_the_cores():
    cores = len(os.sched_getaffinity(0))
    assert default_workers(0) == default_workers(ROWS_PER_WORKER) == 1
    assert default_workers(ROWS_PER_WORKER + 1) == min(2, cores)
    assert default_workers(10**15) == cores
    assert pipeline_options([], rows=10**15).get_all_options()["direct_num_workers"] == cores
    assert pipeline_options(["--direct_num_workers=7"]).get_all_options()["direct_num_workers"] == 7


def test_replace_writes_warehouse_files_and_drops_days_left_without_rows(tmp_path):
    day1, day2 = datetime.date(2026, 5, 1), datetime.date(2026, 5, 2)

    def rows(*days: datetime.date) -> pa.Table:
        return pa.Table.from_pylist([{"dt": d, "kind": "graph", "category": "candidate", "keys": i,
                                      "chip_seconds": 1.5 * i, "share": 0.5} for i, d in enumerate(days)],
                                    COVERAGE.schema)

    Warehouse(tmp_path).replace(COVERAGE, rows(day1, day2), "part", [day1.isoformat(), day2.isoformat()])
    assert Warehouse(tmp_path).read(COVERAGE).num_rows == 2  # ingest's checked read takes them
    Warehouse(tmp_path).replace(COVERAGE, rows(day1), "part", [day1.isoformat(), day2.isoformat()])
    assert Warehouse(tmp_path).read(COVERAGE).to_pylist() == rows(day1).to_pylist()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["part.parquet"]  # no temporaries


_QUIET_PIPELINE = """
import logging

from ranking.beam_logging import quiet_beam_logging

quiet_beam_logging()
import apache_beam as beam

from ranking.beam_io import pipeline_options

with beam.Pipeline(options=pipeline_options(["--direct_num_workers=2"])) as pipeline:
    pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1)
logging.getLogger("apache_beam.runners.worker").error("a real error of Beam's")
logging.getLogger("fleet_fdo.deliver").warning("a warning of ours")
print("done")
"""


@pytest.mark.subprocess
def test_a_pipeline_shows_none_of_beams_notices_but_its_errors_and_our_warnings():
    # Beam's import warns where apitools is missing, its two worker processes announce their
    # start-up: none of it reaches stderr, in this process or the workers'.
    done = subprocess.run([sys.executable, "-c", _QUIET_PIPELINE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(":", 2)[2] for line in lines] == ["a real error of Beam's", "a warning of ours"], lines
