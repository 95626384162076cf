"""`fdo savings`: chip-seconds saved by tuned configs, from the hit metadata in the profiles.

A run that applied a tuned config records its key, store version and expected speedup; it used
`chip_seconds`, so without the config it would have used chip_seconds x speedup, and the saving
is chip_seconds x (speedup - 1) (CATWILD 4.3.1). A run of an entry's holdout arm names the
entry too, but ran with the defaults: it saved nothing and is no hit here. Summed per day, kind (graph or op config),
team, environment, config version, and whether the entry was last written by the validator, as
an Apache Beam pipeline; the days of the range are replaced in the `savings` table.
"""

from __future__ import annotations

import datetime
import functools
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from ingest.tables import GRAPH_RUNS, OP_RUNS
from ranking.beam_io import ArrowSum, ReadPlan, ReadTables, Source, partition_files, pipeline_options, plan_reads
from ranking.tables import SAVINGS
from storage.home import Home
from storage.homes import open_home
from storage.store import live_entries
from storage.warehouse import Warehouse

_KEYS = ["dt", "kind", "team", "env_key", "config_version", "validator_updated"]
_VALUES = ["hit_chip_seconds", "chip_seconds_saved"]
_SUMMED = pa.schema([SAVINGS.schema.field(name) for name in _KEYS + _VALUES])
_COLUMNS = ["team", "env_key", "chip_seconds", "config_key", "config_version", "expected_speedup"]
_KIND_COLUMNS = {"graph": [*_COLUMNS, "holdout"], "op": _COLUMNS}  # op runs have no holdout arm
_TOTAL = ArrowSum(_KEYS, _VALUES, _SUMMED)


def savings_reads(home: Home, first: datetime.date, last: datetime.date,
                  validator_keys: list[str]) -> ReadPlan:
    """What the savings read: both kinds' runs of [first, last], their hits summed where read."""
    return plan_reads([
        Source(kind, partition_files(home, table, first, last), _KIND_COLUMNS[kind],
               functools.partial(_hit_sums, kind=kind, validator_keys=validator_keys),
               empty=pa.schema([table.schema.field(c) for c in _KIND_COLUMNS[kind]]))
        for kind, table in (("graph", GRAPH_RUNS), ("op", OP_RUNS))])


def build_savings_pipeline(pipeline: beam.Pipeline, reads: ReadPlan, home: Home,
                           first: datetime.date, last: datetime.date) -> None:
    """Add the savings accounting of [first, last] to `pipeline`; results land in the warehouse."""
    (pipeline
     | "Read" >> ReadTables(reads)
     | "One key" >> beam.MapTuple(lambda kind, table: (None, table))
     | "Sum" >> beam.CombinePerKey(_TOTAL)
     | "Summed" >> beam.Values()
     | "Write" >> beam.Map(_write, home, _days(first, last)))


def savings(home: Home, first: datetime.date, last: datetime.date,
            beam_args: Iterable[str] = ()) -> pa.Table:
    """Run the savings pipeline over [first, last]; returns the rows it wrote.
    `home` may be a URL on any of Beam's file systems (gs://, s3://, ...)."""
    home = open_home(home)
    home.reach(pipeline_options(beam_args))
    entries = live_entries(home)
    validator_keys = entries.filter(pc.equal(entries.column("provenance"), "validator")).column("key")
    reads = savings_reads(home, first, last, validator_keys.to_pylist())
    with beam.Pipeline(options=pipeline_options(beam_args, reads.rows)) as pipeline:
        build_savings_pipeline(pipeline, reads, home, first, last)
    days = set(_days(first, last))
    return Warehouse(home).read(SAVINGS, filter_dt=days.__contains__).sort_by([(name, "ascending") for name in _KEYS])


def hit_rows(runs: pa.Table, kind: str, validator_keys: list[str]) -> pa.Table:
    """The runs that applied a tuned config, with their hit and saved chip-seconds: those with
    a config key, but for runs of the holdout arm (`holdout` true, where runs have the column)."""
    tuned = pc.is_valid(runs.column("config_key"))
    if "holdout" in runs.column_names:
        tuned = pc.and_(tuned, pc.invert(pc.fill_null(runs.column("holdout"), False)))
    hits = runs.filter(tuned)
    speedup = hits.column("expected_speedup")
    used = hits.column("chip_seconds")
    return pa.table({
        "dt": hits.column("dt"),
        "kind": pa.repeat(pa.scalar(kind), hits.num_rows),
        "team": hits.column("team"),
        "env_key": hits.column("env_key"),
        "config_version": hits.column("config_version"),
        "validator_updated": pc.is_in(hits.column("config_key"),
                                      value_set=pa.array(validator_keys, pa.string())),
        "hit_chip_seconds": used,
        "chip_seconds_saved": pc.multiply(used, pc.subtract(pc.fill_null(speedup, 1.0), 1.0)),
    })


def _hit_sums(runs: pa.Table, kind: str, validator_keys: list[str]) -> pa.Table:
    return _TOTAL.reduce(hit_rows(runs, kind, validator_keys))


def _days(first: datetime.date, last: datetime.date) -> list[str]:
    return [(first + datetime.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def _write(summed: pa.Table, home: Home, days: list[str]) -> None:
    Warehouse(home).replace(SAVINGS, summed, "savings", days)
