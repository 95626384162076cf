"""A home as ranking and savings reach it: any path or URL that Beam's `FileSystems` serves
(a local path; gs://, s3://, hdfs://, azfs:// with Beam's extras for them installed).

Same layout and files as `ingest.warehouse` (`<home>/warehouse/<table>/dt=<dt>/<part>.parquet`,
the table's stored schema inside), so every other stage reads what is written here. A file is
written under a temporary name beside its final one and renamed into place: a local rename is
atomic, and an object store shows an object whole or not at all.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from ingest.errors import first_line
from ingest.warehouse import PARTITION, ROW_GROUP_ROWS, TableSchema

_RAW = CompressionTypes.UNCOMPRESSED  # Parquet bytes as they are: nothing guessed from names


def home_path(home: str | Path, *parts: str) -> str:
    """`parts` joined under `home`, a URL kept a URL (a Path would fold gs:// into gs:/)."""
    return FileSystems.join(str(home), *parts)


def reach(home: str | Path, options: PipelineOptions) -> None:
    """Set Beam's file systems up from the pipeline options (s3:// takes its region and keys
    from them) and check that `home` answers: ValueError naming it when it does not (no file
    system for its scheme, its Beam extra not installed, no access)."""
    FileSystems.set_options(options)
    try:
        FileSystems.exists(str(home))
    except (OSError, ValueError) as exc:  # Beam's BeamIOError is an OSError
        raise ValueError(f"home {home}: {first_line(exc)}") from None


def open_file(path: str):
    """A readable binary file object for `path` on any of Beam's file systems."""
    return FileSystems.open(path, compression_type=_RAW)


def exists(path: str) -> bool:
    """Whether `path` exists on its file system."""
    return FileSystems.exists(path)


def read_parquet(path: str, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file read whole (`columns` only, when given)."""
    with open_file(path) as handle:
        return pq.read_table(handle, columns=columns)


def part_path(home: str | Path, table: TableSchema, dt: str, part: str) -> str:
    """Where part `part` of `table`'s partition `dt` lives."""
    return home_path(home, "warehouse", table.name, f"{PARTITION}={dt}", f"{part}.parquet")


def replace_part(home: str | Path, table: TableSchema, data: pa.Table, part: str, dts: Iterable[str]) -> None:
    """For each day of `dts`, part `part` of `table` holds that day's rows of `data`, or is
    gone when there are none (a rerun recomputes a derived table: nothing stale stays)."""
    data = table.conform(data)
    gone = []
    for dt in dts:
        rows = data.filter(pc.equal(data.column(PARTITION), pa.scalar(datetime.date.fromisoformat(dt))))
        final = part_path(home, table, dt, part)
        if rows.num_rows == 0:
            gone.append(final)
            continue
        head, name = FileSystems.split(final)
        # Named as ingest.warehouse names its temporaries, which it clears after dead writers.
        temporary = FileSystems.join(head, f".{name}.tmp-{os.getpid()}")
        try:
            with FileSystems.create(temporary, compression_type=_RAW) as handle:
                pq.write_table(rows.drop_columns([PARTITION]).cast(table.stored_schema), handle,
                               row_group_size=ROW_GROUP_ROWS)
            FileSystems.rename([temporary], [final])
        except BaseException:
            if FileSystems.exists(temporary):
                FileSystems.delete([temporary])
            raise
    stale = [path for path in gone if FileSystems.exists(path)]
    if stale:
        FileSystems.delete(stale)


def read_partition(home: str | Path, table: TableSchema, dts: Iterable[str]) -> pa.Table:
    """Every part of `table` in the partitions `dts`, with `dt`, in `table`'s schema."""
    pieces = []
    for dt in sorted(set(dts)):
        pattern = home_path(home, "warehouse", table.name, f"{PARTITION}={dt}", "*.parquet")
        for match in sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path):
            rows = read_parquet(match.path)
            day = pa.scalar(datetime.date.fromisoformat(dt), pa.date32())
            pieces.append(table.conform(rows.append_column(PARTITION, pa.repeat(day, rows.num_rows))))
    return pa.concat_tables(pieces) if pieces else table.schema.empty_table()
