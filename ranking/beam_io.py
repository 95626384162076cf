"""Beam plumbing shared by the ranking and savings pipelines: options and warehouse reads.

Files are listed with Beam's `FileSystems.match` and read with Arrow's own file systems, so
the same pipeline reads a local home or gs:// / s3:// (with Beam's gcp or aws extras for the
listing) on any runner. Each
element is a pyarrow Table (one Parquet row group) with the partition's `dt` added: no Python
object per row.
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Callable, Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from ingest.warehouse import PARTITION, TableSchema

# Beam's in-process runner, in multi-process mode: nothing to download or start.
DEFAULT_OPTIONS = ("--runner=DirectRunner", "--direct_running_mode=multi_processing",
                   "--direct_num_workers=2", "--default_sdk_harness_log_level=WARNING")


def pipeline_options(beam_args: Iterable[str] = ()) -> PipelineOptions:
    """Pipeline options from standard Beam flags (`--runner=FlinkRunner`, `--project`, ...);
    the defaults apply only where the flags do not say otherwise."""
    args = list(beam_args)
    given = {a.split("=", 1)[0] for a in args}
    defaults = [a for a in DEFAULT_OPTIONS if a.split("=", 1)[0] not in given]
    if any(a.startswith(("--runner", "--direct_running_mode")) for a in args):
        defaults = [a for a in defaults if not a.startswith("--direct")]
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    return PipelineOptions(defaults + args)


def partition_files(root: str, table: TableSchema, first: datetime.date | None,
                    last: datetime.date | None) -> list[str]:
    """The Parquet files of `table` under warehouse root `root` with dt in [first, last]."""
    pattern = f"{root.rstrip('/')}/{table.name}/{PARTITION}=*/*.parquet"
    files = []
    for match in FileSystems.match([pattern])[0].metadata_list:
        dt = _dt_of(match.path)
        if (first is None or dt >= first) and (last is None or dt <= last):
            files.append(match.path)
    return sorted(files)


class ReadPartitions(beam.PTransform):
    """Read files of a warehouse table as pyarrow Tables (one per row group) with their `dt`,
    each passed through `prepare` (say, a partial aggregation) before it leaves the reader.

    Row groups are spread over the workers; string columns come as dictionary arrays, so an
    aggregation hashes small integers, not strings; only what `prepare` returns travels on.
    """

    def __init__(self, files: list[str], columns: list[str],
                 prepare: Callable[[pa.Table], pa.Table] = lambda table: table) -> None:
        super().__init__()
        self.files, self.columns, self.prepare = files, columns, prepare

    def expand(self, pbegin):
        return (pbegin
                | "Files" >> beam.Create(self.files)
                | "Row groups" >> beam.FlatMap(_row_groups)
                | "Spread" >> beam.Reshuffle()
                | "Read" >> beam.Map(_read_row_group, self.columns, self.prepare))


def _open(path: str) -> pq.ParquetFile:
    """Arrow's own (C++) file system for the path's scheme: local, gs://, s3://, hdfs://."""
    filesystem, inner = pafs.FileSystem.from_uri(path if "://" in path else os.path.abspath(path))
    return filesystem.open_input_file(inner)


def _row_groups(path: str) -> Iterable[tuple[str, int]]:
    with _open(path) as handle:
        count = pq.ParquetFile(handle).metadata.num_row_groups
    return [(path, index) for index in range(count)]


def _read_row_group(group: tuple[str, int], columns: list[str],
                    prepare: Callable[[pa.Table], pa.Table]) -> pa.Table:
    path, index = group
    with _open(path) as handle:
        source = pq.ParquetFile(handle, read_dictionary=[
            c for c in columns if c != PARTITION])
        table = source.read_row_group(index, columns=[c for c in columns if c != PARTITION])
    dt = pa.scalar(_dt_of(path), pa.date32())
    return prepare(table.append_column(PARTITION, pa.repeat(dt, table.num_rows)))


def _dt_of(path: str) -> datetime.date:
    part = next(p for p in path.split("/")[::-1] if p.startswith(f"{PARTITION}="))
    return datetime.date.fromisoformat(part.split("=", 1)[1])


class ArrowSum(beam.CombineFn):
    """Sum `values` grouped by `keys` over a PCollection of pyarrow Tables, vectorized.

    Each input table is reduced with Arrow's hash aggregation; accumulators are small tables
    of partial sums that merge the same way. With no `values` it yields the distinct keys.
    `schema` (keys then values) types the output when there was no input at all.
    """

    def __init__(self, keys: list[str], values: list[str], schema: pa.Schema) -> None:
        self.keys, self.values, self.schema = keys, values, schema

    def create_accumulator(self) -> list[pa.Table]:
        return []

    def add_input(self, accumulator: list[pa.Table], table: pa.Table) -> list[pa.Table]:
        accumulator.append(self.reduce(table))
        if len(accumulator) >= 16:
            accumulator[:] = [self.reduce(pa.concat_tables(accumulator))]
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[pa.Table]]) -> list[pa.Table]:
        tables = [t for accumulator in accumulators for t in accumulator]
        return [self.reduce(pa.concat_tables(tables))] if tables else []

    def extract_output(self, accumulator: list[pa.Table]) -> pa.Table:
        if not accumulator:
            return self.schema.empty_table()
        return self.reduce(pa.concat_tables(accumulator))

    def reduce(self, table: pa.Table) -> pa.Table:
        """`table` summed by the keys: apply it where a table is read too, so that only
        partial sums travel between workers."""
        summed = table.group_by(self.keys, use_threads=False).aggregate(
            [(name, "sum") for name in self.values])
        return summed.rename_columns([c.removesuffix("_sum") for c in summed.column_names]
                                     ).select(self.schema.names).cast(self.schema)
