"""The Parquet warehouse: declared table schemas, atomic partitioned writes, checked reads.

Layout: `<home>/warehouse/<table>/dt=YYYY-MM-DD/<part>.parquet`, readable by DuckDB with
`read_parquet('<home>/warehouse/<table>/*/*.parquet', hive_partitioning = true)`.

Two kinds of table:
- fact tables (graph_runs, op_runs, ...) are append-only. Each write names its part after the
  input it came from, so writing the same input twice finds the part there and adds nothing.
- dimension tables (graphs, ops) hold one row per key, upserted under a lock by rewriting the
  partitions that changed; the merge is idempotent, so a rerun after a crash converges.

Every file is written to a temporary name in its final directory and renamed into place, so a
killed process leaves either the whole file or none of it (plus a temporary file that the
next writer removes). Every file carries its table name and schema version in its Parquet
metadata; reads check both and the columns' types.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

PARTITION = "dt"
ROW_GROUP_ROWS = 1 << 17  # Beam's multi-process runner stalls on much larger elements
_TABLE_META = b"fleet_fdo.table"
_VERSION_META = b"fleet_fdo.schema_version"
_TMP_MARK = ".tmp-"


class SchemaError(ValueError):
    """Data that does not match its table's declared schema."""


@dataclass(frozen=True)
class TableSchema:
    """A warehouse table: its name, schema version, columns (with `dt`) and key, if a dimension."""

    name: str
    version: int
    schema: pa.Schema
    key: tuple[str, ...] = ()  # set for dimension tables: one row per key

    @property
    def stored_schema(self) -> pa.Schema:
        """The schema inside each file: the columns but `dt` (the directory holds it), the
        table name and the version."""
        columns = pa.schema([f for f in self.schema if f.name != PARTITION])
        return columns.with_metadata({_TABLE_META: self.name.encode(),
                                      _VERSION_META: str(self.version).encode()})

    def conform(self, table: pa.Table) -> pa.Table:
        """`table` with exactly this schema's columns, in order; SchemaError if it cannot be."""
        missing = [f.name for f in self.schema if f.name not in table.column_names]
        if missing:
            raise SchemaError(f"{self.name}: missing columns {missing}")
        try:
            table = table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(f"{self.name}: {exc}") from None
        for field in self.schema:
            if not field.nullable and table.column(field.name).null_count:
                raise SchemaError(f"{self.name}: column {field.name!r} has nulls")
        return table


class Warehouse:
    """The tables under `<home>/warehouse`."""

    def __init__(self, home: Path | str) -> None:
        self.root = Path(home) / "warehouse"

    def table_dir(self, table: TableSchema) -> Path:
        """The directory holding `table`'s partitions."""
        return self.root / table.name

    def files(self, table: TableSchema) -> list[Path]:
        """The table's Parquet files (not temporaries), in a stable order."""
        return sorted(self.table_dir(table).glob(f"{PARTITION}=*/*.parquet"))

    def has_part(self, table: TableSchema, dt: str, part: str) -> bool:
        """Whether the part named `part` of partition `dt` has been written."""
        return self._part_path(table, dt, part).exists()

    def parts_of(self, table: TableSchema, part: str) -> list[Path]:
        """Every partition's file named `part` (what one input wrote)."""
        return sorted(self.table_dir(table).glob(f"{PARTITION}=*/{part}.parquet"))

    def append(self, table: TableSchema, data: pa.Table, part: str) -> list[Path]:
        """Write `data` as part `part` of each partition its `dt` values fall in.

        Partitions that already hold the part are left alone: the same input adds nothing twice.
        """
        data = table.conform(data)
        written = []
        for dt, rows in _split_by_partition(data):
            path = self._part_path(table, dt, part)
            if not path.exists():
                _write_atomic(path, rows, table)
                written.append(path)
        return written

    def replace(self, table: TableSchema, data: pa.Table, part: str,
                dts: Iterable[str] = ()) -> list[Path]:
        """Write `data` as part `part` of its partitions, replacing what that part held there.

        For derived tables (candidates, savings) that a rerun recomputes: partitions in `dts`
        that `data` no longer has rows for lose the part.
        """
        data = table.conform(data)
        written = []
        for dt, rows in _split_by_partition(data):
            path = self._part_path(table, dt, part)
            _write_atomic(path, rows, table)
            written.append(path)
        for dt in set(dts) - {p.parent.name.split("=", 1)[1] for p in written}:
            self._part_path(table, dt, part).unlink(missing_ok=True)
        return written

    @contextlib.contextmanager
    def part_writer(self, table: TableSchema, part: str) -> Iterator[Callable[[pa.Table], None]]:
        """Stream batches into part `part` of their partitions; all files appear at the end.

        Partitions that already hold the part (an earlier run got that far) are skipped.
        """
        writers: dict[str, tuple[pq.ParquetWriter, Path, Path]] = {}

        def write(batch: pa.Table) -> None:
            batch = table.conform(batch)
            for dt, rows in _split_by_partition(batch):
                if dt not in writers:
                    final = self._part_path(table, dt, part)
                    if final.exists():
                        writers[dt] = (None, final, final)  # type: ignore[assignment]
                        continue
                    tmp = _temporary(final)
                    writers[dt] = (pq.ParquetWriter(tmp, table.stored_schema), tmp, final)
                writer = writers[dt][0]
                if writer is not None:
                    writer.write_table(_stored(rows, table), row_group_size=ROW_GROUP_ROWS)

        try:
            yield write
        except BaseException:
            for writer, tmp, final in writers.values():
                if writer is not None:
                    writer.close()
                    tmp.unlink(missing_ok=True)
            raise
        for writer, tmp, final in writers.values():
            if writer is not None:
                writer.close()
                _fsync(tmp)
                os.replace(tmp, final)

    def read(self, table: TableSchema, columns: list[str] | None = None,
             filter_dt: Callable[[str], bool] | None = None) -> pa.Table:
        """All rows of `table` (with `dt`), each file's schema checked against the declaration."""
        pieces = []
        for path in self.files(table):
            dt = path.parent.name.split("=", 1)[1]
            if filter_dt is not None and not filter_dt(dt):
                continue
            pieces.append(read_checked(path, table, columns))
        if not pieces:
            return table.schema.empty_table().select(columns or table.schema.names)
        return pa.concat_tables(pieces)

    def upsert(self, table: TableSchema, rows: pa.Table,
               merge: Callable[[pa.Table], pa.Table]) -> int:
        """Merge `rows` into dimension table `table`; returns how many keys changed or arrived.

        `merge` gets the old and new rows of the touched keys together and returns one row per
        key; it must be idempotent (merging the same rows again changes nothing). A row's
        partition is its `dt` after merging. Writers of one table take turns on a lock.
        """
        rows = table.conform(rows)
        if rows.num_rows == 0:
            return 0
        with self._lock(table):
            old = self.read(table)
            combined = merge(pa.concat_tables([old, rows]))
            combined = table.conform(combined).sort_by([(k, "ascending") for k in table.key])
            old_sorted = old.sort_by([(k, "ascending") for k in table.key])
            changed = _changed_partitions(old_sorted, combined)
            for dt, part in _split_by_partition(combined):
                if dt in changed:
                    _write_atomic(self._part_path(table, dt, "rows"), part, table)
            for dt in changed - {dt for dt, _ in _split_by_partition(combined)}:
                self._part_path(table, dt, "rows").unlink(missing_ok=True)
            return _count_changed_keys(old_sorted, combined, table.key)

    def remove_temporaries(self) -> int:
        """Delete temporary files left by killed writers; returns how many."""
        removed = 0
        for path in self.root.glob(f"*/{PARTITION}=*/*{_TMP_MARK}*"):
            pid = path.name.rsplit(_TMP_MARK, 1)[1]
            if pid.isdigit() and process_alive(int(pid)):
                continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    def _part_path(self, table: TableSchema, dt: str, part: str) -> Path:
        return self.table_dir(table) / f"{PARTITION}={dt}" / f"{part}.parquet"

    @contextlib.contextmanager
    def _lock(self, table: TableSchema) -> Iterator[None]:
        self.table_dir(table).mkdir(parents=True, exist_ok=True)
        with open(self.table_dir(table) / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def read_checked(path: Path, table: TableSchema, columns: list[str] | None = None) -> pa.Table:
    """Read one Parquet file of `table`, checking its table name, schema version and columns."""
    try:
        stored = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(f"{path}: not a readable Parquet file ({exc})") from None
    meta = stored.metadata or {}
    if meta.get(_TABLE_META) != table.name.encode():
        raise SchemaError(f"{path}: written for table {meta.get(_TABLE_META)!r}, not {table.name!r}")
    version = meta.get(_VERSION_META, b"?").decode()
    if version != str(table.version):
        raise SchemaError(f"{path}: {table.name} schema version {version}, expected {table.version}")
    for field in table.schema:
        if field.name == PARTITION:
            continue
        if stored.get_field_index(field.name) < 0 or stored.field(field.name).type != field.type:
            raise SchemaError(f"{path}: column {field.name!r} missing or not {field.type}")
    wanted = columns or table.schema.names
    data = pq.read_table(path, columns=[c for c in wanted if c != PARTITION], partitioning=None)
    if PARTITION in wanted:
        dt = pa.scalar(_parse_dt(path.parent.name.split("=", 1)[1]), table.schema.field(PARTITION).type)
        data = data.append_column(table.schema.field(PARTITION), pa.repeat(dt, data.num_rows))
    return data.select(wanted).replace_schema_metadata(None)


def _stored(rows: pa.Table, table: TableSchema) -> pa.Table:
    return rows.drop_columns([PARTITION]).cast(table.stored_schema)


def _parse_dt(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


def _split_by_partition(data: pa.Table) -> Iterable[tuple[str, pa.Table]]:
    if data.num_rows == 0:
        return
    dts = data.column(PARTITION)
    for dt in pc.unique(dts).to_pylist():
        yield _dt_text(dt), data.filter(pc.equal(dts, dt))


def _dt_text(dt: object) -> str:
    return dt.isoformat() if hasattr(dt, "isoformat") else str(dt)


def _changed_partitions(old: pa.Table, new: pa.Table) -> set[str]:
    old_parts = dict(_split_by_partition(old))
    new_parts = dict(_split_by_partition(new))
    return {dt for dt in old_parts.keys() | new_parts.keys()
            if dt not in old_parts or dt not in new_parts or not old_parts[dt].equals(new_parts[dt])}


def _count_changed_keys(old: pa.Table, new: pa.Table, key: tuple[str, ...]) -> int:
    old_rows = {tuple(r[k] for k in key): r for r in old.to_pylist()}
    return sum(old_rows.get(tuple(r[k] for k in key)) != r for r in new.to_pylist())


def _temporary(final: Path) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.with_name(f".{final.name}{_TMP_MARK}{os.getpid()}")


def _write_atomic(final: Path, rows: pa.Table, table: TableSchema) -> None:
    tmp = _temporary(final)
    try:
        pq.write_table(_stored(rows, table), tmp, row_group_size=ROW_GROUP_ROWS)
        _fsync(tmp)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def process_alive(pid: int) -> bool:
    """Whether a process of this pid runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
