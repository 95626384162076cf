"""The Beam plumbing under rank, savings and deliver: reads of real Parquet row groups, the
warehouse sink and the staged table (storage.beam_io), the default runner and its options
(storage.beam_runner), and the vectorized sums' partials across row groups and the coder
(ranking.arrow_sums)."""

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

from ranking.arrow_sums import ArrowSum, ArrowTablesCoder, TaggedSums
from ranking.tables import COVERAGE
from storage.beam_io import ReadTables, Source, StageTable, WriteWarehouse, plan_reads
from storage.beam_runner import ROWS_PER_WORKER, default_workers, pipeline_options
from storage.home_factory import open_home
from storage.warehouse import TableSchema, Warehouse

_SCHEMA = pa.schema([("key", pa.string()), ("flag", pa.bool_()), ("value", pa.float64())])
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


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


def test_read_tables_reads_every_row_group_and_stands_in_for_missing_files_and_columns(tmp_path):
    tables = [_rows(seed, 500) for seed in (3, 5)]
    files = []
    for index, table in enumerate(tables):
        path = tmp_path / "t" / f"dt=2026-01-0{index + 1}" / "part.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(table, path, row_group_size=120)  # 5 row groups per file
        files.append(str(path))
    old = tmp_path / "old" / "dt=2026-01-03" / "part.parquet"  # written before `flag` was added
    old.parent.mkdir(parents=True)
    pq.write_table(tables[0].drop_columns(["flag"]), old)
    here, nothing, earlier = (TableSchema(name, 1, _SCHEMA) for name in ("here", "nothing", "earlier"))
    sources = [Source(here, files, ["key", "flag", "value", "dt"]), Source(nothing, [], ["key", "flag", "value"]),
               Source(earlier, [str(old)], ["key", "flag", "value"])]
    fn = ArrowSum(["key", "flag"], ["value"], _SCHEMA)

    def summed(tagged):
        tag, tables = tagged
        return tag, sorted((r["key"], r["flag"], round(r["value"], 9)) for r in tables[tag].to_pylist())

    want = sorted((k, f, round(v, 9)) for (k, f), v in _expected(tables).items())
    without_flag = sorted((r["key"], None, round(r["value_sum"], 9)) for r in tables[0].group_by(
        "key").aggregate([("value", "sum")]).to_pylist())
    with beam.Pipeline(options=pipeline_options(IN_PROCESS)) as pipeline:
        groups = (pipeline
                  | "Read row groups" >> ReadTables(plan_reads([Source(here, files, ["key", "value", "dt"])]))
                  | beam.MapTuple(lambda name, table: (name, table.num_rows, str(table.column("dt")[0]))))
        assert_that(groups, equal_to([("here", 120, d) for d in ("2026-01-01", "2026-01-02") for _ in range(4)]
                                     + [("here", 20, "2026-01-01"), ("here", 20, "2026-01-02")]),
                    label="row groups")
        out = (pipeline
               | "Read" >> ReadTables(plan_reads(sources))
               | beam.MapTuple(lambda name, table: (name, (name, table)))
               | beam.CombinePerKey(TaggedSums({"here": fn, "nothing": fn, "earlier": fn}))
               | beam.Map(summed))
        assert_that(out, equal_to([("here", want), ("nothing", []), ("earlier", without_flag)]), label="sums")
    with pytest.raises(ValueError, match="one source per table"):
        plan_reads([Source(here, files, ["key"]), Source(here, [], ["value"])])


def test_the_default_runner_gets_a_worker_per_share_of_rows_up_to_the_cores():
    cores = len(os.sched_getaffinity(0))
    assert default_workers(0) == default_workers(ROWS_PER_WORKER) == 1
    assert default_workers(ROWS_PER_WORKER + 1) == min(2, cores)
    assert default_workers(10**15) == cores
    assert pipeline_options([], rows=10**15).get_all_options()["direct_num_workers"] == cores
    assert pipeline_options(["--direct_num_workers=7"]).get_all_options()["direct_num_workers"] == 7


def test_the_warehouse_sink_writes_as_the_warehouse_and_drops_days_left_without_rows(tmp_path):
    day1, day2 = datetime.date(2026, 5, 1), datetime.date(2026, 5, 2)
    days = [day1.isoformat(), day2.isoformat()]
    home = open_home(tmp_path / "home")

    def rows(*days: datetime.date) -> pa.Table:
        return pa.Table.from_pylist([{"dt": d, "kind": "graph", "category": "candidate", "keys": i,
                                      "chip_seconds": 1.5 * i, "share": 0.5} for i, d in enumerate(days)],
                                    COVERAGE.schema)

    def write(parts: list[tuple[str, pa.Table]]) -> None:
        with beam.Pipeline(options=pipeline_options(IN_PROCESS)) as pipeline:
            written = pipeline | beam.Create(parts) | WriteWarehouse(home, COVERAGE, days)
            assert_that(written, equal_to([str(home.location("warehouse", "coverage", f"dt={dt}", f"{part}.parquet"))
                                           for part, table in parts for dt in sorted(
                                               {d.isoformat() for d in table.column("dt").to_pylist()})]))

    write([("a", rows(day1, day2)), ("b", rows(day2))])
    assert Warehouse(home).read(COVERAGE).num_rows == 3  # the checked read takes them
    Warehouse(tmp_path / "direct").replace(COVERAGE, rows(day1, day2), "a", days)
    for dt in days:  # the very bytes the Warehouse writes: its schema, name and version
        name = f"warehouse/coverage/dt={dt}/a.parquet"
        assert (tmp_path / "home" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes()
    write([("a", rows(day1))])  # a rerun replaces its part: day2 has no rows of it now
    assert Warehouse(home).read(COVERAGE).sort_by("dt").to_pylist() == pa.concat_tables(
        [rows(day1), rows(day2)]).to_pylist()
    assert sorted(p.name for p in (tmp_path / "home").rglob("*") if p.is_file()) == [
        "a.parquet", "b.parquet"]  # no temporaries


def test_a_staged_table_is_one_parquet_file_its_driver_reads_back(tmp_path):
    table = _rows(7, 50)
    path = str(tmp_path / "delivery" / "accepted.parquet")
    with beam.Pipeline(options=pipeline_options(IN_PROCESS)) as pipeline:
        assert_that(pipeline | beam.Create([table]) | StageTable(path), equal_to([path]))
    assert pq.read_table(path).equals(table)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["accepted.parquet"]


_QUIET_PIPELINE = """
import logging

from storage.beam_logging import quiet_beam_logging

quiet_beam_logging()
import apache_beam as beam

from storage.beam_runner import pipeline_options

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


@pytest.mark.subprocess
def test_the_demo_and_fdo_import_beam_only_after_quieting_it(tmp_path):
    # Beam's import warns "apitools not found" once, on the root logger, at once: the demo's and
    # fdo's main quiet Beam first (storage.beam_logging), so neither may import it before.
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, pipelines.demo, pipelines.cli; "
                               "print([m for m in sys.modules if m.split('.')[0] == 'apache_beam'])"],
        capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0 and imported.stdout == "[]\n", imported.stderr
    # A real Beam stage of the demo's nightly run, as the demo points a user to it: no notices.
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(tmp_path), "rank"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "apitools" not in done.stdout + done.stderr and "WARNING" not in done.stderr, done.stderr
