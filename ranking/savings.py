"""`fdo savings`: chip-seconds saved by tuned configs, at run time and at compile time.

Runtime, from the hit metadata in the profiles: a run that applied a tuned config records its
key, store version and expected speedup; it used `chip_seconds`, so without the config it would
have used chip_seconds x speedup, and the saving is chip_seconds x (speedup - 1) (CATWILD
4.3.1). A run of an entry's holdout arm names the entry too, but ran with the defaults: it saved
nothing and is no hit here.

Compile time, from the compiler hook's `hits`: a job waits on its compiles with its accelerators
idle, so a compile's seconds cost chip-seconds too (an entry's XLA:GPU autotune results let XLA
skip autotuning, and flags change what XLA does). The counterfactual is the fleet's own: the
compiles of the entry's holdout arm ran the defaults. Per (key, env_key), a compile that tried
the entry's config (outcome applied, or fallback: the failed tuned compile and the defaults'
after it, a cost of the entry) saved the median compile seconds of the key's holdout compiles
in the accounted window minus the median of the compiles that tried the same config version in
the window (a robust figure on both arms: one compile on a loaded host moves neither), negative
where the tried ones were slower, times the devices of the process that compiled
(`process_devices`: the environment's device count, or a process's local devices where its job
spans processes: each process compiles, records its own hit and holds its own devices
waiting; 1 where no graph of that environment was ingested). A key
with fewer than MIN_HOLDOUT_COMPILES holdout compiles in the window claims nothing: its
compiles are counted `compile_unmeasured`. A compile's team is its job's in the window's
graph runs (UNKNOWN_TEAM where the job ran no profiled graph there): hits carry no team.

Summed per day, kind (graph or op config), team, environment, config version, and whether the
entry was last written by the validator, as an Apache Beam pipeline; the days of the range are
replaced in the `savings` table.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterable

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.ran_tuned import ran_tuned
from ingest.tables import GRAPH_RUNS, GRAPHS, HITS, OP_RUNS, partitioning_of
from ranking.arrow_sums import ArrowSum, TaggedSums
from ranking.tables import SAVINGS
from storage.beam_io import ReadPlan, ReadTables, Source, WriteWarehouse, partition_files, plan_reads
from storage.beam_runner import pipeline_options
from storage.home import Home
from storage.home_factory import open_home
from storage.store_reader import StoreReader
from storage.warehouse import TableSchema, Warehouse, partition_days
from vocabulary.hits import TRIED, HitOutcome
from vocabulary.store import Provenance
from vocabulary.tuning import Kind

# Holdout compiles a key needs before its compile time saved is claimed: the median of 3
# discards one outlier (a compile on a loaded host, a cold cache); of 1 or 2 it would be one
# compile's noise. No interval is claimed, so no more are needed.
MIN_HOLDOUT_COMPILES = 3
# The team of a compile whose job ran no profiled graph in the window: ingestion's name for a
# job that did not say (ingest.sidecars).
UNKNOWN_TEAM = "unknown"

_KEYS = ["dt", "kind", "team", "env_key", "config_version", "validator_updated"]
_RUNTIME = ["hit_chip_seconds", "chip_seconds_saved"]
_COMPILE = ["compile_hits", "compile_unmeasured", "compile_chip_seconds_saved"]
_SUMMED = pa.schema([SAVINGS.schema.field(name) for name in _KEYS + _RUNTIME + _COMPILE])
_COLUMNS = ["team", "env_key", "chip_seconds", "config_key", "config_version", "expected_speedup"]
_KIND_COLUMNS = {Kind.GRAPH: [*_COLUMNS, "holdout"], Kind.OP: _COLUMNS}  # op runs have no holdout arm
_KIND_OF_RUNS = {GRAPH_RUNS.name: Kind.GRAPH, OP_RUNS.name: Kind.OP}
_HIT_COLUMNS = ["job_id", "key", "env_key", "outcome", "kind", "config_version", "compile_seconds"]
_TRIED_KEYS = ["dt", "kind", "job_id", "key", "env_key", "config_version", "validator_updated"]

_RUNS = ArrowSum(_KEYS, _RUNTIME, pa.schema([_SUMMED.field(name) for name in _KEYS + _RUNTIME]))
_TOTAL = ArrowSum(_KEYS, _RUNTIME + _COMPILE, _SUMMED)
# Compiles that tried a config, counted per job (whose team is found later) and entry.
_TRIED = ArrowSum(_TRIED_KEYS, ["compiles"], pa.schema(
    [HITS.schema.field(name) for name in _TRIED_KEYS if name != "validator_updated"]
    + [("validator_updated", pa.bool_()), ("compiles", pa.int64())]))
# Each arm's compile seconds, counted per value: a sum that merges exactly, whose values give
# the exact median. The holdout arm's per key, the tried compiles' per key and config version.
_HELD_KEYS, _TRIED_MEDIAN_KEYS = ["key", "env_key"], ["key", "env_key", "config_version"]
_HELD = ArrowSum([*_HELD_KEYS, "compile_seconds"], ["compiles"], pa.schema(
    [HITS.schema.field(name) for name in (*_HELD_KEYS, "compile_seconds")] + [("compiles", pa.int64())]))
_TRIED_SECONDS = ArrowSum([*_TRIED_MEDIAN_KEYS, "compile_seconds"], ["compiles"], pa.schema(
    [HITS.schema.field(name) for name in (*_TRIED_MEDIAN_KEYS, "compile_seconds")] + [("compiles", pa.int64())]))
_JOBS = ArrowSum(["job_id", "team"], [], pa.schema([GRAPH_RUNS.schema.field(name) for name in ("job_id", "team")]))
_DEVICES = ArrowSum(["env_key", "process_devices"], [], pa.schema(
    [GRAPHS.schema.field("env_key"), ("process_devices", pa.int32())]))
_SUMS = TaggedSums({"runs": _RUNS, "tried": _TRIED, "tried_seconds": _TRIED_SECONDS, "held": _HELD,
                    "jobs": _JOBS, "devices": _DEVICES})


@dataclass(frozen=True)
class BookedSavings:
    """The booked savings of some `savings` rows, in chip-seconds: at run time and at compile
    time apart, and the compiles behind the latter."""

    runtime: float
    compile: float  # negative where the tried configs compiled slower than the holdout arm
    compile_hits: int  # compiles whose key had holdout compiles to compare with
    compile_unmeasured: int  # compiles whose key had too few: no claim

    @property
    def total(self) -> float:
        """Runtime and compile time saved."""
        return self.runtime + self.compile

    @classmethod
    def of(cls, rows: pa.Table) -> BookedSavings:
        """The sums of `rows` (the `savings` table's columns); the compile columns of rows
        written before they existed (null) count nothing."""
        def total(name: str) -> Any:
            return pc.sum(rows.column(name)).as_py() or 0

        return cls(runtime=float(total("chip_seconds_saved")), compile=float(total("compile_chip_seconds_saved")),
                   compile_hits=int(total("compile_hits")), compile_unmeasured=int(total("compile_unmeasured")))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, in chip-seconds."""
        return {"runtime_chip_seconds": self.runtime, "compile_chip_seconds": self.compile,
                "total_chip_seconds": self.total, "compile_hits": self.compile_hits,
                "compile_unmeasured": self.compile_unmeasured,
                "min_holdout_compiles": MIN_HOLDOUT_COMPILES}


def savings_reads(home: Home, first: datetime.date, last: datetime.date) -> ReadPlan:
    """What the savings read: both kinds' runs of [first, last] (the graph runs with their
    jobs' teams), the hits of [first, last], and every graph's environment and devices."""
    def source(table: TableSchema, columns: list[str], first: datetime.date | None = first,
               last: datetime.date | None = last) -> Source:
        return Source(table, partition_files(home, table, first, last), columns)

    return plan_reads([source(GRAPH_RUNS, [*_KIND_COLUMNS[Kind.GRAPH], "job_id"]),
                       source(OP_RUNS, _KIND_COLUMNS[Kind.OP]),
                       source(HITS, _HIT_COLUMNS),
                       source(GRAPHS, ["env_key", "device_count", "partitioning"], None, None)])


class AccountSavings(beam.PTransform):
    """The savings rows, from (table name, rows) of graph_runs, op_runs and hits of the days
    accounted and of graphs, as `ReadTables` reads `savings_reads` (an empty table for a table
    without files); `validator_keys`, the store keys whose live entry the validator
    wrote last. Yields one ("savings", rows) for `WriteWarehouse`.

    Each row group is reduced where it is read: runs to their hits' sums (and the graph runs to
    their jobs' teams, as distinct pairs), hits to the compiles that tried a config (counted per
    job and entry) and to each arm's compile seconds (counted per value), graphs to the
    devices of a process of each environment (distinct pairs); one combine sums them all, and
    `account` makes the rows.
    """

    def __init__(self, validator_keys: list[str]) -> None:
        super().__init__()
        self.validator_keys = validator_keys

    def expand(self, tables):
        return (tables
                | "Sum where read" >> beam.FlatMap(_partial_sums, self.validator_keys)
                | "One key" >> beam.Map(lambda tagged: (None, tagged))
                | "Sum" >> beam.CombinePerKey(_SUMS)
                | "Account" >> beam.MapTuple(lambda _, sums: ("savings", account(**sums))))


def build_savings_pipeline(pipeline: beam.Pipeline, reads: ReadPlan, home: Home, first: datetime.date,
                           last: datetime.date, validator_keys: list[str]) -> None:
    """Add the savings accounting of [first, last] to `pipeline`: read (`savings_reads`),
    `AccountSavings`, and replace the days' rows in the warehouse."""
    (pipeline
     | "Read" >> ReadTables(reads)
     | "Account" >> AccountSavings(validator_keys)
     | "Write" >> WriteWarehouse(home, SAVINGS, partition_days(first, last)))


def savings(home: Home, first: datetime.date, last: datetime.date,
            beam_args: Iterable[str] = ()) -> pa.Table:
    """Run the savings pipeline over [first, last]; returns the rows it wrote.
    `home` may be a URL on any of Beam's file systems (gs://, s3://, ...)."""
    home = open_home(home)
    home.reach(pipeline_options(beam_args))
    entries = StoreReader(home).live_entries()
    validator_keys = entries.filter(pc.equal(entries.column("provenance"), Provenance.VALIDATOR)).column("key")
    reads = savings_reads(home, first, last)
    with beam.Pipeline(options=pipeline_options(beam_args, reads.rows)) as pipeline:
        build_savings_pipeline(pipeline, reads, home, first, last, validator_keys.to_pylist())
    days = set(partition_days(first, last))
    return Warehouse(home).read(SAVINGS, filter_dt=days.__contains__).sort_by([(name, "ascending") for name in _KEYS])


def hit_rows(runs: pa.Table, kind: Kind, validator_keys: list[str]) -> pa.Table:
    """The runs that applied a tuned config, with their hit and saved chip-seconds: those with
    a config key, but for runs of the holdout arm (`ingest.ran_tuned.ran_tuned`)."""
    hits = runs.filter(ran_tuned(runs))
    speedup = hits.column("expected_speedup")
    used = hits.column("chip_seconds")
    return pa.table({
        "dt": hits.column("dt"),
        "kind": pa.repeat(pa.scalar(kind), hits.num_rows),
        "team": hits.column("team"),
        "env_key": hits.column("env_key"),
        "config_version": hits.column("config_version"),
        "validator_updated": _validator_updated(hits.column("config_key"), validator_keys),
        "hit_chip_seconds": used,
        "chip_seconds_saved": pc.multiply(used, pc.subtract(pc.fill_null(speedup, 1.0), 1.0)),
    })


def account(runs: pa.Table, tried: pa.Table, tried_seconds: pa.Table, held: pa.Table, jobs: pa.Table,
            devices: pa.Table) -> pa.Table:
    """The savings rows, from the sums of `AccountSavings`: the runtime sums `runs`,
    and the compile time saved by the compiles of `tried`: the median of their key's holdout
    compiles (`held`) less the median of the compiles that tried their config (`tried_seconds`),
    each with its job's team (`jobs`) and the devices of a process of its environment
    (`devices`)."""
    compiles = compile_rows(tried, tried_seconds, held, jobs, devices)
    zeros = {name: pa.repeat(pa.scalar(0, _SUMMED.field(name).type), runs.num_rows) for name in _COMPILE}
    runtime = pa.table({**{name: runs.column(name) for name in _KEYS + _RUNTIME}, **zeros})
    return _TOTAL.reduce(pa.concat_tables([runtime.cast(_SUMMED), compiles])).cast(_SUMMED)


def compile_rows(tried: pa.Table, tried_seconds: pa.Table, held: pa.Table, jobs: pa.Table,
                 devices: pa.Table) -> pa.Table:
    """The compile time saved, one row per row of `tried` (with `_SUMMED`'s columns, runtime 0)."""
    team = jobs.group_by("job_id", use_threads=False).aggregate([("team", "min")])  # one per job
    count = devices.group_by("env_key", use_threads=False).aggregate([("process_devices", "max")])
    joined = (tried.join(holdout_medians(held), _HELD_KEYS).join(tried_medians(tried_seconds), _TRIED_MEDIAN_KEYS)
              .join(team, "job_id").join(count, "env_key"))
    measured = pc.fill_null(pc.greater_equal(joined.column("holdout_compiles"), MIN_HOLDOUT_COMPILES), False)
    tries = joined.column("compiles")
    # n compiles saved n x (the holdout median - the tried median), in device-seconds.
    saved = pc.multiply(pc.multiply(pc.cast(tries, pa.float64()),
                                    pc.subtract(joined.column("holdout_median"), joined.column("tried_median"))),
                        pc.cast(pc.fill_null(joined.column("process_devices_max"), 1), pa.float64()))
    nothing = pa.scalar(0, pa.int64())
    return pa.table({
        **{name: joined.column(name) for name in ("dt", "kind")},
        "team": pc.fill_null(joined.column("team_min"), UNKNOWN_TEAM),
        **{name: joined.column(name) for name in ("env_key", "config_version", "validator_updated")},
        **{name: pa.repeat(pa.scalar(0, _SUMMED.field(name).type), joined.num_rows) for name in _RUNTIME},
        "compile_hits": pc.if_else(measured, tries, nothing),
        "compile_unmeasured": pc.if_else(measured, nothing, tries),
        "compile_chip_seconds_saved": pc.if_else(measured, saved, 0.0),
    }).cast(_SUMMED)


def holdout_medians(held: pa.Table) -> pa.Table:
    """Per (key, env_key) of `held` (the holdout arm's compile seconds counted per value): the
    holdout compiles and their median (of an even count, the mean of the middle two)."""
    return _medians(held, _HELD_KEYS, "holdout")


def tried_medians(tried_seconds: pa.Table) -> pa.Table:
    """Per (key, env_key, config_version) of `tried_seconds` (the compile seconds of the
    compiles that tried that version's config, counted per value): those compiles and their
    median, as `holdout_medians`."""
    return _medians(tried_seconds, _TRIED_MEDIAN_KEYS, "tried")


def _medians(counted: pa.Table, keys: list[str], arm: str) -> pa.Table:
    """Per `keys` of `counted` (compile seconds counted per value): `{arm}_compiles` and
    `{arm}_median`."""
    ordered = counted.sort_by([(name, "ascending") for name in (*keys, "compile_seconds")])
    counts = ordered.column("compiles").to_numpy()
    seconds = np.repeat(ordered.column("compile_seconds").to_numpy(), counts)
    groups = ordered.group_by(keys, use_threads=False).aggregate([("compiles", "sum")]).sort_by(
        [(name, "ascending") for name in keys])  # the order of `ordered`
    sizes = groups.column("compiles_sum").to_numpy()
    starts = np.cumsum(sizes) - sizes
    median = (seconds[starts + (sizes - 1) // 2] + seconds[starts + sizes // 2]) / 2
    return pa.table({**{name: groups.column(name) for name in keys},
                     f"{arm}_compiles": groups.column("compiles_sum"),
                     f"{arm}_median": pa.array(median, pa.float64())})


def process_devices(device_count: int, partitioning: str | None) -> int:
    """The devices one process of a job holds, in an environment of `device_count` devices
    partitioned as `partitioning` (`graphs.partitioning`): its local devices where the job
    was partitioned, else all of the environment's (a job's compile holds them all)."""
    found = partitioning_of(partitioning)
    return found.local_devices if found is not None else device_count


def _process_devices(graphs: pa.Table) -> pa.Table:
    """The distinct (env_key, process_devices) of `graphs` rows."""
    distinct = graphs.group_by(["env_key", "device_count", "partitioning"], use_threads=False).aggregate([])
    return _DEVICES.reduce(pa.table({
        "env_key": distinct.column("env_key"),
        "process_devices": pa.array([process_devices(count, text) for count, text in zip(
            distinct.column("device_count").to_pylist(), distinct.column("partitioning").to_pylist())],
            pa.int32())}))


def _partial_sums(table: tuple[str, pa.Table], validator_keys: list[str]) -> list[tuple[str, pa.Table]]:
    """(what `_SUMS` sums it as, the partial sum) of (table name, rows)."""
    name, rows = table
    if name in _KIND_OF_RUNS:
        hits = [("runs", _RUNS.reduce(hit_rows(rows, _KIND_OF_RUNS[name], validator_keys)))]
        return [*hits, ("jobs", _JOBS.reduce(rows))] if name == GRAPH_RUNS.name else hits
    if name == HITS.name:
        tried = rows.filter(pc.is_in(rows.column("outcome"), value_set=pa.array(TRIED, pa.string())))
        return [("tried", _tried_sums(tried, validator_keys)), ("tried_seconds", _counted(_TRIED_SECONDS, tried)),
                ("held", _counted(_HELD, rows.filter(pc.equal(rows.column("outcome"), str(HitOutcome.HOLDOUT)))))]
    if name == GRAPHS.name:
        return [("devices", _process_devices(rows))]
    raise ValueError(f"savings: no input is table {name!r}")


def _tried_sums(tried: pa.Table, validator_keys: list[str]) -> pa.Table:
    return _TRIED.reduce(pa.table({
        "dt": tried.column("dt"),
        "kind": pc.fill_null(pc.cast(tried.column("kind"), pa.string()), Kind.GRAPH),  # the hook looks up graphs
        **{name: tried.column(name) for name in ("job_id", "key", "env_key", "config_version")},
        "validator_updated": _validator_updated(tried.column("key"), validator_keys),
        "compiles": pa.repeat(pa.scalar(1, pa.int64()), tried.num_rows)}))


def _counted(sums: ArrowSum, hits: pa.Table) -> pa.Table:
    """The compile seconds of `hits`, counted per value and `sums`'s keys."""
    return sums.reduce(pa.table({
        **{name: hits.column(name) for name in sums.keys},
        "compiles": pa.repeat(pa.scalar(1, pa.int64()), hits.num_rows)}))


def _validator_updated(keys: pa.ChunkedArray, validator_keys: list[str]) -> pa.ChunkedArray:
    """Whether each store key was last written by the validator."""
    return pc.is_in(keys, value_set=pa.array(validator_keys, pa.string()))


