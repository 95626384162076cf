"""The warehouse in Beam pipelines: its tables read as Arrow tables (`ReadTables`), and the
sinks a pipeline ends in (`WriteWarehouse`; `StageTable` for a table its driver reads back).

Files are listed from the home and opened through it, so a read or a write works on any home
(`storage.home.Home`: local paths, gs:// and s3:// with Beam's extras) and on any runner. Each
element read is a pyarrow Table (one Parquet row group, string columns dictionary-encoded) with
the partition's `dt` added: no Python object per row.

Shaped for Beam's fusion: every file and row group of every input is one element of a single
`Create`, so one stage reads all inputs on all workers in parallel, and the steps that follow
the read (a stage's reduction of each row group) run where it was read.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from storage.home import Home
from storage.home_factory import atomic_write, open_home
from storage.warehouse import PARTITION, TableSchema, Warehouse, partition_of


def partition_files(home: Home, table: TableSchema, first: datetime.date | None,
                    last: datetime.date | None) -> list[str]:
    """The Parquet files of `table` in `home`'s warehouse with dt in [first, last]."""
    files = []
    for path in Warehouse(home).files(table):
        dt = _dt_of(str(path))
        if (first is None or dt >= first) and (last is None or dt <= last):
            files.append(str(path))
    return files


@dataclass(frozen=True)
class Source:
    """One input of `ReadTables`: `columns` of `table`, from its `files` (`partition_files`).

    A file written before one of the columns was added (`storage.warehouse.added_column`) reads
    with it null. A source without files yields one empty table, so that the steps downstream
    of it run all the same.
    """

    table: TableSchema
    files: list[str]
    columns: list[str]

    @property
    def schema(self) -> pa.Schema:
        """The columns read from the files (`dt` comes from their directories)."""
        return pa.schema([self.table.schema.field(c) for c in self.columns if c != PARTITION])


@dataclass(frozen=True)
class ReadPlan:
    """What `ReadTables` reads: (source index, file, row group) for every row group of every
    source, from the files' footers, and how many rows that is."""

    sources: list[Source]
    units: list[tuple[int, str | None, int]]
    rows: int


def plan_reads(sources: list[Source]) -> ReadPlan:
    """Plan reading `sources`: every row group of their files, one unit each. ValueError: two
    sources of one table (its rows would not say which they are)."""
    names = [source.table.name for source in sources]
    if len(set(names)) < len(names):
        raise ValueError(f"one source per table, not {names}")
    units: list[tuple[int, str | None, int]] = []
    rows = 0
    for index, source in enumerate(sources):
        for path in source.files:
            with open_home(path).open(path) as handle:
                metadata = pq.ParquetFile(handle).metadata
            units.extend((index, path, group) for group in range(metadata.num_row_groups))
            rows += metadata.num_rows
        if not source.files:
            units.append((index, None, 0))
    return ReadPlan(sources, units, rows)


class ReadTables(beam.PTransform):
    """Read a plan's sources in one stage: (table name, rows) per row group, spread over the
    workers; the rows have the source's columns, then `dt`."""

    def __init__(self, plan: ReadPlan) -> None:
        super().__init__()
        self.plan = plan

    def expand(self, pbegin):
        # Create spreads its elements over the workers (it reshuffles more than one element).
        return (pbegin
                | "Row groups" >> beam.Create(self.plan.units)
                | "Read" >> beam.Map(_read_unit, self.plan.sources))


class WriteWarehouse(beam.PTransform):
    """The sink of warehouse table `table` in `home`: each element (part, rows) replaces part
    `part` in the partitions of its rows' `dt`, and removes it from the partitions of `days`
    (ISO dates) it has no rows for (`Warehouse.replace`: each file carries the table's name
    and schema version, is written atomically and named after its part, so that a rerun
    replaces what it wrote). Yields the paths written."""

    def __init__(self, home: Home, table: TableSchema, days: Iterable[str]) -> None:
        super().__init__()
        self.home, self.table, self.days = home, table, list(days)

    def expand(self, parts):
        return parts | "Replace" >> beam.FlatMap(_replace, self.home, self.table, self.days)


class StageTable(beam.PTransform):
    """The sink of a table that a pipeline hands back to its driver: the PCollection's one
    pyarrow Table, written to the Parquet file `path` (on any home) atomically, not durably
    (the driver reads it at once, then deletes it). Yields `path`."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def expand(self, tables):
        return tables | "Write" >> beam.Map(_stage, self.path)


def _read_unit(unit: tuple[int, str | None, int], sources: list[Source]) -> tuple[str, pa.Table]:
    index, path, group = unit
    source = sources[index]
    if path is None:
        empty = source.schema.empty_table()
        return source.table.name, empty.append_column(PARTITION, pa.array([], pa.date32()))
    stored = source.schema.names
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
    if len(present) < len(stored):
        # A file written before a column was added: null there.
        for name in stored:
            if name not in present:
                table = table.append_column(name, pa.nulls(table.num_rows, source.schema.field(name).type))
        table = table.select(stored)
    dt = pa.scalar(_dt_of(path), pa.date32())
    return source.table.name, table.append_column(PARTITION, pa.repeat(dt, table.num_rows))


def _dt_of(path: str) -> datetime.date:
    return datetime.date.fromisoformat(partition_of(path))


def _replace(part_rows: tuple[str, pa.Table], home: Home, table: TableSchema, days: list[str]) -> list[str]:
    part, rows = part_rows
    return [str(path) for path in Warehouse(home).replace(table, rows, part, days)]


def _stage(table: pa.Table, path: str) -> str:
    atomic_write(path, lambda handle: pq.write_table(table, handle), durable=False)
    return path
