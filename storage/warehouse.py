"""The Parquet warehouse: declared table schemas, atomic partitioned writes, checked reads.

Layout: `<home>/warehouse/<table>/dt=YYYY-MM-DD/<part>.parquet`, readable by DuckDB with
`read_parquet('<home>/warehouse/<table>/*/*.parquet', hive_partitioning = true,
union_by_name = true)` (without `union_by_name`, DuckDB takes the first file's columns, and a
column added since that file was written goes missing).

Two kinds of table:
- fact tables (graph_runs, op_runs, ...) are append-only. Each write names its part after the
  input it came from, so writing the same input twice finds the part there and adds nothing.
- dimension tables (graphs, ops) hold one row per key, upserted under a lock by rewriting the
  partitions that changed; the merge is idempotent, so a rerun after a crash converges.

The home may be local or a URL (`storage.home.Home`); every file is written with its atomic
write, so a killed process leaves either the whole file or none of it (plus a temporary file
that the next writer removes). Every file carries its table name and schema version in its Parquet
metadata; reads check both and the columns' types. A table's schema may grow by nullable columns
(`added_column`): files of the versions before one was added still read, the column null in
their rows. String columns may declare their longest value (`bounded_string`); no write lands a
longer one.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.home import TMP_MARK, Home, Pending
from storage.home_factory import open_home

PARTITION = "dt"
ROW_GROUP_ROWS = 1 << 17  # Beam's multi-process runner stalls on much larger elements
_TABLE_META = b"fleet_fdo.table"
_VERSION_META = b"fleet_fdo.schema_version"
_MAX_CHARS_META = b"fleet_fdo.max_chars"
_ADDED_META = b"fleet_fdo.added_in"


class SchemaError(ValueError):
    """Data that does not match its table's declared schema."""


def bounded_string(name: str, max_chars: int, nullable: bool = False) -> pa.Field:
    """A string column whose values hold at most `max_chars` characters, for a TableSchema."""
    return pa.field(name, pa.string(), nullable=nullable,
                    metadata={_MAX_CHARS_META: str(max_chars).encode()})


def added_column(column: pa.Field, version: int) -> pa.Field:
    """`column` (nullable), added to its TableSchema at schema `version`: the table's files of
    earlier versions, which lack it, still read, with nulls in it."""
    return column.with_metadata({**(column.metadata or {}), _ADDED_META: str(version).encode()})


@dataclass(frozen=True)
class TableSchema:
    """A warehouse table: its name, schema version, columns (with `dt`) and key, if a dimension.

    The bounds that `bounded_string` columns declare move to `max_chars`, and the versions that
    `added_column` columns came in to `added`; the schema keeps no field metadata, so files and
    tables compare equal whatever is declared. ValueError: an added column that is not nullable,
    or whose version is not after the first and up to this one.
    """

    name: str
    version: int
    schema: pa.Schema
    key: tuple[str, ...] = ()  # set for dimension tables: one row per key
    max_chars: tuple[tuple[str, int], ...] = field(init=False, default=())
    added: tuple[tuple[str, int], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        bounds = tuple((f.name, int(f.metadata[_MAX_CHARS_META])) for f in self.schema
                       if f.metadata and _MAX_CHARS_META in f.metadata)
        added = tuple((f.name, int(f.metadata[_ADDED_META])) for f in self.schema
                      if f.metadata and _ADDED_META in f.metadata)
        for name, version in added:
            if not self.schema.field(name).nullable or not 1 < version <= self.version:
                raise ValueError(f"{self.name}: added column {name!r} must be nullable and added "
                                 f"after version 1, by version {self.version}")
        plain = pa.schema([f.remove_metadata() for f in self.schema], metadata=self.schema.metadata)
        object.__setattr__(self, "schema", plain)  # frozen: set once, here
        object.__setattr__(self, "max_chars", bounds)
        object.__setattr__(self, "added", added)

    def absent_in(self, version: str) -> set[str] | None:
        """The columns that files of schema `version` (as their metadata spells it) lack: those
        added after it. None where this table cannot read files of that version: a newer one,
        or one older than the version before its first added column (the columns changed
        otherwise then)."""
        oldest = min((since for _, since in self.added), default=self.version + 1) - 1
        if not version.isdigit() or not oldest <= int(version) <= self.version:
            return None
        return {name for name, since in self.added if since > int(version)}

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
        for column in self.schema:
            if not column.nullable and table.column(column.name).null_count:
                raise SchemaError(f"{self.name}: column {column.name!r} has nulls")
        for name, bound in self.max_chars:
            if _may_exceed(table.column(name), bound):
                longest = pc.max(pc.utf8_length(table.column(name))).as_py()
                if longest is not None and longest > bound:
                    raise SchemaError(f"{self.name}: a {name!r} value of {longest} characters, "
                                      f"over its {bound}-character bound")
        return table

    def row_checks(self, table: pa.Table) -> list[tuple[str, pa.ChunkedArray]]:
        """(reason, per-row ok) for what any row of this table must be, on the columns of
        `table` that it declares: values where they are required, finite numbers, strings
        within their bound (left out where no value can exceed it). For `split_rows`."""
        checks = []
        bounds = dict(self.max_chars)
        for column in self.schema:
            if column.name not in table.column_names:
                continue
            values = table.column(column.name)
            if not column.nullable:
                checks.append((f"{column.name} missing", pc.is_valid(values)))
            if pa.types.is_floating(values.type):
                checks.append((f"{column.name} not a finite number",
                               pc.or_kleene(pc.is_null(values), pc.is_finite(values))))
            if column.name in bounds and pa.types.is_string(values.type) \
                    and _may_exceed(values, bounds[column.name]):
                checks.append((f"{column.name} over {bounds[column.name]} characters",
                               pc.or_kleene(pc.is_null(values),
                                            pc.less_equal(pc.utf8_length(values), bounds[column.name]))))
        return checks


class Warehouse:
    """The tables under `<home>/warehouse`, on any `Home`."""

    def __init__(self, home: Home | str | Path) -> None:
        self.home = open_home(home)
        self.root = self.home.location("warehouse")

    def table_dir(self, table: TableSchema) -> Any:
        """Where `table`'s partitions are."""
        return self.home.location("warehouse", table.name)

    def files(self, table: TableSchema) -> list[Any]:
        """The table's Parquet files (not temporaries), in a stable order."""
        return self.home.glob(f"warehouse/{table.name}/{PARTITION}=*/*.parquet")

    def has_part(self, table: TableSchema, dt: str, part: str) -> bool:
        """Whether the part named `part` of partition `dt` has been written."""
        return self.home.exists(self._part_path(table, dt, part))

    def parts_of(self, table: TableSchema, part: str) -> list[Any]:
        """Every partition's file named `part` (what one input wrote)."""
        return self.home.glob(f"warehouse/{table.name}/{PARTITION}=*/{part}.parquet")

    def append(self, table: TableSchema, data: pa.Table, part: str) -> list[Any]:
        """Write `data` as part `part` of each partition its `dt` values fall in.

        Partitions that already hold the part are left alone: the same input adds nothing twice.
        """
        data = table.conform(data)
        written = []
        for dt, rows in _split_by_partition(data):
            path = self._part_path(table, dt, part)
            if not self.home.exists(path):
                self._write(path, rows, table)
                written.append(path)
        return written

    def replace(self, table: TableSchema, data: pa.Table, part: str,
                dts: Iterable[str] = ()) -> list[Any]:
        """Write `data` as part `part` of its partitions, replacing what that part held there.

        For derived tables (candidates, savings) that a rerun recomputes: partitions in `dts`
        that `data` no longer has rows for lose the part.
        """
        data = table.conform(data)
        written, days = [], set()
        for dt, rows in _split_by_partition(data):
            path = self._part_path(table, dt, part)
            self._write(path, rows, table)
            written.append(path)
            days.add(dt)
        self.home.delete([self._part_path(table, dt, part) for dt in sorted(set(dts) - days)])
        return written

    @contextlib.contextmanager
    def part_writer(self, table: TableSchema, part: str) -> Iterator[Callable[[pa.Table], None]]:
        """Stream batches into part `part` of their partitions; all files appear at the end.

        Partitions that already hold the part (an earlier run got that far) are skipped.
        """
        writers: dict[str, tuple[pq.ParquetWriter, Pending] | None] = {}

        def write(batch: pa.Table) -> None:
            batch = table.conform(batch)
            for dt, rows in _split_by_partition(batch):
                if dt not in writers:
                    final = self._part_path(table, dt, part)
                    if self.home.exists(final):
                        writers[dt] = None
                        continue
                    pending = self.home.create(final)
                    writers[dt] = (pq.ParquetWriter(pending.handle, table.stored_schema), pending)
                open_part = writers[dt]
                if open_part is not None:
                    open_part[0].write_table(_stored(rows, table), row_group_size=ROW_GROUP_ROWS)

        try:
            yield write
        except BaseException:
            for writer, pending in filter(None, writers.values()):
                writer.close()
                pending.discard()
            raise
        for writer, pending in filter(None, writers.values()):
            writer.close()
            pending.commit()

    def read(self, table: TableSchema, columns: list[str] | None = None,
             filter_dt: Callable[[str], bool] | None = None) -> pa.Table:
        """All rows of `table` (with `dt`), each file's schema checked against the declaration."""
        pieces = list(self.read_files(table, columns, filter_dt))
        if not pieces:
            return table.schema.empty_table().select(columns or table.schema.names)
        return pa.concat_tables(pieces)

    def read_files(self, table: TableSchema, columns: list[str] | None = None,
                   filter_dt: Callable[[str], bool] | None = None) -> Iterator[pa.Table]:
        """The rows of `table`, one file at a time (for summing up more rows than fit in memory)."""
        for path in self.files(table):
            if filter_dt is None or filter_dt(partition_of(path)):
                yield self.read_file(path, table, columns)

    def read_file(self, path: Any, table: TableSchema, columns: list[str] | None = None) -> pa.Table:
        """One Parquet file of `table`, its table name, schema version and columns checked."""
        with self.home.open(path) as source:
            return read_checked(source, table, columns, partition_of(path))

    def upsert(self, table: TableSchema, rows: pa.Table,
               merge: Callable[[pa.Table], pa.Table]) -> int:
        """Merge `rows` into dimension table `table`; returns how many keys changed or arrived.

        `merge` gets the old and new rows of the touched keys together and returns one row per
        key; it must be idempotent (merging the same rows again changes nothing). A row's
        partition is its `dt` after merging. Writers of one table take turns on the home's lock.
        """
        rows = table.conform(rows)
        if rows.num_rows == 0:
            return 0
        with self.home.lock(self.home.location("warehouse", table.name, ".lock")):
            old = self.read(table)
            combined = merge(pa.concat_tables([old, rows]))
            combined = table.conform(combined).sort_by([(k, "ascending") for k in table.key])
            old_sorted = old.sort_by([(k, "ascending") for k in table.key])
            changed = _changed_partitions(old_sorted, combined)
            for dt, part in _split_by_partition(combined):
                if dt in changed:
                    self._write(self._part_path(table, dt, "rows"), part, table)
            gone = changed - {dt for dt, _ in _split_by_partition(combined)}
            self.home.delete([self._part_path(table, dt, "rows") for dt in sorted(gone)])
            return _count_changed_keys(old_sorted, combined, table.key)

    def remove_temporaries(self) -> int:
        """Delete temporary files left by killed writers; returns how many."""
        return self.home.remove_temporaries(f"warehouse/*/{PARTITION}=*/*{TMP_MARK}*")

    def _part_path(self, table: TableSchema, dt: str, part: str) -> Any:
        return self.home.location("warehouse", table.name, f"{PARTITION}={dt}", f"{part}.parquet")

    def _write(self, path: Any, rows: pa.Table, table: TableSchema) -> None:
        self.home.atomic_write(path, lambda handle: pq.write_table(
            _stored(rows, table), handle, row_group_size=ROW_GROUP_ROWS))


def partition_days(first: datetime.date, last: datetime.date) -> list[str]:
    """The `dt` partitions of the days from `first` to `last`, both included, in order (none
    where `last` is before `first`)."""
    return [(first + datetime.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def partition_of(path: Any) -> str:
    """The `dt` of a warehouse file, from its directory's name."""
    return str(path).rsplit("/", 2)[-2].split("=", 1)[1]


def _may_exceed(values: pa.ChunkedArray, max_chars: int) -> bool:
    """Whether a string might hold over `max_chars` characters: a character takes a byte at
    least, and counting bytes (from the offsets) is much faster than counting characters."""
    longest = pc.max(pc.binary_length(values)).as_py()
    return longest is not None and longest > max_chars


def split_rows(rows: pa.Table, checks: list[tuple[str, pa.ChunkedArray]],
               notes: pa.Array | None = None) -> tuple[pa.Table, pa.Table, list[str]]:
    """(rows passing every check, the others, a reason per other row). A check is (reason,
    per-row ok; null counts as failed). `notes`, if given, is a per-row reason of its own (null
    where none) that fails its row and, being the cause, is the row's whole reason."""
    masks = [pc.fill_null(pc.invert(ok), True) for _, ok in checks]
    if notes is not None:
        masks.append(pc.is_valid(notes))
    if not masks:
        return rows, rows.slice(0, 0), []
    any_bad = masks[0]
    for mask in masks[1:]:
        any_bad = pc.or_(any_bad, mask)
    bad = rows.filter(any_bad)
    reasons: list[str] = []
    if bad.num_rows:
        flags = [mask.filter(any_bad).to_pylist() for mask in masks[:len(checks)]]
        names = [name for name, _ in checks]
        own = notes.filter(any_bad).to_pylist() if notes is not None else [None] * bad.num_rows
        reasons = [own[i] or "; ".join(n for n, failed in zip(names, flags) if failed[i])
                   for i in range(bad.num_rows)]
    return rows.filter(pc.invert(any_bad)), bad, reasons


def read_checked(source: Any, table: TableSchema, columns: list[str] | None = None,
                 dt: str | None = None) -> pa.Table:
    """Read one Parquet file of `table` (a local path, or a file pyarrow reads), checking its
    table name, schema version and columns. `dt` is its partition (default: from the path)."""
    try:
        stored = pq.read_schema(source)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(f"{_name(source)}: not a readable Parquet file ({exc})") from None
    where = _name(source)
    meta = stored.metadata or {}
    if meta.get(_TABLE_META) != table.name.encode():
        raise SchemaError(f"{where}: written for table {meta.get(_TABLE_META)!r}, not {table.name!r}")
    version = meta.get(_VERSION_META, b"?").decode()
    absent = table.absent_in(version)
    if absent is None:
        raise SchemaError(f"{where}: {table.name} schema version {version}, expected {table.version}")
    for column in table.schema:
        if column.name == PARTITION or column.name in absent:
            continue
        if stored.get_field_index(column.name) < 0 or stored.field(column.name).type != column.type:
            raise SchemaError(f"{where}: column {column.name!r} missing or not {column.type}")
    wanted = columns or table.schema.names
    if hasattr(source, "seek"):
        source.seek(0)
    data = pq.read_table(source, columns=[c for c in wanted if c != PARTITION and c not in absent],
                         partitioning=None)
    for name in absent.intersection(wanted):  # added since this file was written
        data = data.append_column(table.schema.field(name),
                                  pa.nulls(data.num_rows, table.schema.field(name).type))
    if PARTITION in wanted:
        day = _parse_dt(dt if dt is not None else partition_of(source))
        data = data.append_column(table.schema.field(PARTITION),
                                  pa.repeat(pa.scalar(day, table.schema.field(PARTITION).type), data.num_rows))
    return data.select(wanted).replace_schema_metadata(None)


def _name(source: Any) -> str:
    return str(getattr(source, "name", source))


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
