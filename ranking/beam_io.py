"""Beam plumbing shared by the ranking, savings and delivery pipelines: options, warehouse
reads and vectorized sums.

Files are listed with Beam's `FileSystems.match` and opened with `FileSystems.open`, so a read
works on any home (`storage.home.Home`: local paths, gs:// and s3:// with Beam's extras)
and on any runner. Each element is a pyarrow Table (one Parquet row group, string columns
dictionary-encoded) with the partition's `dt` added: no Python object per row.

Shaped for Beam's fusion: every file and row group of every input is one element of a single
`Create`, so one stage reads all inputs on all workers in parallel, and each row group is
reduced (`prepare`) where it is read; the combiners are lifted, so only each worker's partial
sums leave it, coded as Arrow IPC streams rather than pickles.
"""

from __future__ import annotations

import copy
import datetime
import logging
import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.coders import Coder, TupleCoder
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from storage.home import Home
from storage.homes import open_home
from storage.warehouse import PARTITION, TableSchema, Warehouse, partition_of

# Beam's in-process runner, in multi-process mode: nothing to download or start.
DEFAULT_OPTIONS = ("--runner=ranking.beam_io.InProcessRunner",
                   "--direct_running_mode=multi_processing",
                   "--default_sdk_harness_log_level=WARNING")


class InProcessRunner(PipelineRunner):
    """The runner Beam's DirectRunner uses for batch pipelines (the FnApiRunner, handed the
    options for its workers as DirectRunner hands them), without DirectRunner's first try of
    Prism: a download of a Go binary from GitHub on each pipeline, which runs the pipeline on
    another runner where it succeeds, hangs where the network drops packets, and leaves a
    `beam-temp*` directory in the temp dir where it fails."""

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> PipelineResult:
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        environment = None
        if options.view_as(DirectOptions).direct_running_mode == "multi_processing":
            # Beam's own worker processes, started as ranking.beam_worker: quiet on stderr. The
            # runner takes the environment given here where no running mode names another
            # (on a copy: the caller's options stay as they were).
            environment = SubprocessSDKEnvironment.from_command_string(
                f"{shlex.quote(sys.executable)} -m ranking.beam_worker")
            options = copy.deepcopy(options)
            options.view_as(DirectOptions).direct_running_mode = None
        runner = fn_runner.FnApiRunner(default_environment=environment, provision_info=provision)
        return runner.run_pipeline(pipeline, options)


# Rows a worker of the in-process runner must have to read before adding it pays. Each worker
# is a fresh Python that imports Beam (about 1 s of CPU) and is stopped in turn at the end; one
# core reads and sums about 10 million rows a second. On 2 cores shared with other work, two
# workers ranked 10 million rows 1.6 s slower than one when the machine was busy, 0.2 s faster
# when it was quiet (benchmarks/bench_rank.py).
ROWS_PER_WORKER = 25_000_000


def default_workers(rows: int) -> int:
    """Workers for the in-process runner to read `rows`: one per ROWS_PER_WORKER rows, at
    least one, at most one per core this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, math.ceil(rows / ROWS_PER_WORKER)))


def pipeline_options(beam_args: Iterable[str] = (), rows: int = 0) -> PipelineOptions:
    """Pipeline options from standard Beam flags (`--runner=FlinkRunner`, `--project`, ...);
    the defaults apply only where the flags do not say otherwise. `rows`, what the pipeline
    reads, sizes the default runner's workers."""
    args = list(beam_args)
    defaults = [*DEFAULT_OPTIONS, f"--direct_num_workers={default_workers(rows)}"]
    given = {a.split("=", 1)[0] for a in args}
    defaults = [a for a in defaults if a.split("=", 1)[0] not in given]
    if any(a.startswith(("--runner", "--direct_running_mode")) for a in args):
        defaults = [a for a in defaults if not a.startswith("--direct")]
    beam = logging.getLogger("apache_beam")
    beam.setLevel(max(beam.level, logging.WARNING))  # as high as a command set it (ranking.beam_logging)
    return PipelineOptions(defaults + args)


def partition_files(home: Home, table: TableSchema, first: datetime.date | None,
                    last: datetime.date | None) -> list[str]:
    """The Parquet files of `table` in `home`'s warehouse with dt in [first, last]."""
    files = []
    for path in Warehouse(home).files(table):
        dt = _dt_of(str(path))
        if (first is None or dt >= first) and (last is None or dt <= last):
            files.append(str(path))
    return files


def _identity(table: pa.Table) -> pa.Table:
    return table


@dataclass(frozen=True)
class Source:
    """One input of `ReadTables`: the files of a table and what to make of each row group.

    `prepare` gets each row group (with `dt`) where it is read (say, to a partial sum), so
    only what it returns travels on. With `empty` (the schema of `columns`), a source without
    files still yields one empty table, so that the steps downstream of its tag run all the same.
    """

    tag: Hashable
    files: list[str]
    columns: list[str]
    prepare: Callable[[pa.Table], pa.Table] = _identity
    empty: pa.Schema | None = field(default=None)


@dataclass(frozen=True)
class ReadPlan:
    """What `ReadTables` reads: (source index, file, row group) for every row group of every
    source, from the files' footers, and how many rows that is."""

    sources: list[Source]
    units: list[tuple[int, str | None, int]]
    rows: int


def plan_reads(sources: list[Source]) -> ReadPlan:
    """Plan reading `sources`: every row group of their files, one unit each."""
    units, rows = [], 0
    for index, source in enumerate(sources):
        for path in source.files:
            with open_home(path).open(path) as handle:
                metadata = pq.ParquetFile(handle).metadata
            units.extend((index, path, group) for group in range(metadata.num_row_groups))
            rows += metadata.num_rows
        if not source.files and source.empty is not None:
            units.append((index, None, 0))
    return ReadPlan(sources, units, rows)


class ReadTables(beam.PTransform):
    """Read a plan's sources in one stage: (tag, table) per row group, spread over the workers."""

    def __init__(self, plan: ReadPlan) -> None:
        super().__init__()
        self.plan = plan

    def expand(self, pbegin):
        # Create spreads its elements over the workers (it reshuffles more than one element).
        return (pbegin
                | "Row groups" >> beam.Create(self.plan.units)
                | "Read" >> beam.Map(_read_unit, self.plan.sources))


class ReadPartitions(beam.PTransform):
    """Read `files` of a warehouse table as pyarrow Tables (one per row group, `dt` added),
    each passed through `prepare` before it leaves the reader."""

    def __init__(self, files: list[str], columns: list[str],
                 prepare: Callable[[pa.Table], pa.Table] = _identity) -> None:
        super().__init__()
        self.source = Source(None, files, columns, prepare)

    def expand(self, pbegin):
        return pbegin | ReadTables(plan_reads([self.source])) | beam.Values()


def _read_unit(unit: tuple[int, str | None, int], sources: list[Source]) -> tuple[Hashable, pa.Table]:
    index, path, group = unit
    source = sources[index]
    if path is None:
        empty = source.empty.empty_table()
        return source.tag, source.prepare(empty.append_column(PARTITION, pa.array([], pa.date32())))
    stored = [c for c in source.columns if c != PARTITION]
    with open_home(path).open(path) as handle:
        # Only the columns the file has: pyarrow refuses to open it with a dictionary column
        # it lacks.
        names = set(pq.read_schema(handle).names)
        present = [c for c in stored if c in names]
        if hasattr(handle, "seek"):  # a file, not a local path
            handle.seek(0)
        # Dictionary-encoded strings: read without decoding, hashed as small integers.
        parquet = pq.ParquetFile(handle, read_dictionary=present)
        table = parquet.read_row_group(group, columns=present, use_threads=False)
    if len(present) < len(stored) and source.empty is not None:
        # A file written before a column was added (storage.warehouse.added_column): null there.
        for name in stored:
            if name not in present:
                table = table.append_column(name, pa.nulls(table.num_rows, source.empty.field(name).type))
        table = table.select(stored)
    elif len(present) < len(stored):
        raise KeyError(f"{path}: no column {sorted(set(stored) - set(present))}")
    dt = pa.scalar(_dt_of(path), pa.date32())
    return source.tag, source.prepare(table.append_column(PARTITION, pa.repeat(dt, table.num_rows)))


def _dt_of(path: str) -> datetime.date:
    return datetime.date.fromisoformat(partition_of(path))


class ArrowTablesCoder(Coder):
    """A list of pyarrow Tables of one schema as one Arrow IPC stream: compact (a slice
    carries only its own rows, where a pickle carries its parent's buffers) and fast."""

    def encode(self, tables: list[pa.Table]) -> bytes:
        if not tables:
            return b""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tables[0].schema) as writer:
            for table in tables:
                writer.write_table(table)
        return sink.getvalue().to_pybytes()

    def decode(self, encoded: bytes) -> list[pa.Table]:
        return [pa.ipc.open_stream(encoded).read_all()] if encoded else []

    def is_deterministic(self) -> bool:
        return False


class ArrowSum(beam.CombineFn):
    """Sum `values` grouped by `keys` over a PCollection of pyarrow Tables, vectorized.

    Each input table is reduced with Arrow's hash aggregation; accumulators are small tables
    of partial sums that merge the same way. Partial sums keep string keys dictionary-encoded
    (merging hashes small integers, not strings); the output has `schema` (keys then values),
    which also types it when there was no input at all. With no `values` it yields the
    distinct keys.
    """

    def __init__(self, keys: list[str], values: list[str], schema: pa.Schema) -> None:
        self.keys, self.values, self.schema = keys, values, schema
        self.partial = pa.schema([
            field.with_type(pa.dictionary(pa.int32(), field.type)) if pa.types.is_string(field.type)
            else field for field in schema])

    def create_accumulator(self) -> list[pa.Table]:
        return []

    def add_input(self, accumulator: list[pa.Table], table: pa.Table) -> list[pa.Table]:
        # A partial sum already (reduced where it was read) joins as it is; compaction merges.
        accumulator.append(table if table.schema.equals(self.partial) else self.reduce(table))
        if len(accumulator) >= 16:
            accumulator[:] = self.compact(accumulator)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[pa.Table]]) -> list[pa.Table]:
        return self.compact([t for accumulator in accumulators for t in accumulator])

    def compact(self, accumulator: list[pa.Table]) -> list[pa.Table]:
        return [self.reduce(pa.concat_tables(accumulator))] if len(accumulator) > 1 else accumulator

    def extract_output(self, accumulator: list[pa.Table]) -> pa.Table:
        if not accumulator:
            return self.schema.empty_table()
        return self.reduce(pa.concat_tables(accumulator)).cast(self.schema)

    def get_accumulator_coder(self) -> Coder:
        return ArrowTablesCoder()

    def reduce(self, table: pa.Table) -> pa.Table:
        """`table` summed by the keys, as a partial sum: apply it where a table is read too,
        so that only partial sums travel between workers."""
        # Chunks read or merged apart have their own dictionaries: one dictionary per column.
        summed = table.unify_dictionaries().group_by(self.keys, use_threads=False).aggregate(
            [(name, "sum") for name in self.values])
        return summed.rename_columns([c.removesuffix("_sum") for c in summed.column_names]
                                     ).select(self.schema.names).cast(self.partial)


class TaggedSums(beam.CombineFn):
    """Several ArrowSums in one combine: inputs are (tag, table), the output maps each tag to
    its sum, so tables of different shapes that belong together (a kind's costs and its
    symbols) meet in one step without another shuffle."""

    def __init__(self, sums: dict[str, ArrowSum]) -> None:
        self.tags = sorted(sums)
        self.sums = [sums[tag] for tag in self.tags]

    def create_accumulator(self) -> tuple[list[pa.Table], ...]:
        return tuple(fn.create_accumulator() for fn in self.sums)

    def add_input(self, accumulator, tagged: tuple[str, pa.Table]):
        tag, table = tagged
        index = self.tags.index(tag)
        self.sums[index].add_input(accumulator[index], table)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            for mine, theirs in zip(merged, accumulator):
                mine.extend(theirs)
        return self.compact(merged)

    def compact(self, accumulator):
        return tuple(fn.compact(part) for fn, part in zip(self.sums, accumulator))

    def extract_output(self, accumulator) -> dict[str, pa.Table]:
        return {tag: fn.extract_output(part) for tag, fn, part in zip(self.tags, self.sums, accumulator)}

    def get_accumulator_coder(self) -> Coder:
        return TupleCoder([fn.get_accumulator_coder() for fn in self.sums])
