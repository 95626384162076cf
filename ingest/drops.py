"""The profile drop format: what a fleet that already aggregates its profiles hands us.

A drop is a Parquet file named `*.graph_runs.parquet` or `*.op_runs.parquet`, or JSON lines
named `*.graph_runs.jsonl` / `*.op_runs.jsonl`, one row per job, graph (or op) and day:

graph_runs drop
  dt            date 'YYYY-MM-DD'
  job_id, team  string
  fingerprint   32 hex: graph fingerprint
  env_key       32 hex: environment key
  device_kind   string
  chips         int, 1 .. 1,048,576
  executions    int, >= 0
  seconds       float: wall seconds the job spent in this graph that day (<= 86,400)
  optional: compiler_version, opted_out (bool, default false), and the hit metadata of an
  applied config: config_key, config_version, expected_speedup (null when none was applied),
  holdout (bool: true for a run of the entry's holdout arm, with the defaults; it needs a
  config_key; default null)

op_runs drop
  dt, job_id, team, env_key   as above
  op_fingerprint              32 hex
  graph_fingerprint           32 hex: the graph the op ran in
  chip_seconds                float, 0 .. chips x seconds bounds
  optional: opted_out and the hit metadata, as above

Rows are checked with vectorized compute; bad rows are quarantined with the reason and the
good rows land (chip_seconds = chips x seconds). A row is bad for any value it cannot hold: one
of the wrong type, a number out of range or not finite (`1e400`), a bad date, a string over its
column's bound (ingest.tables), a JSON line that does not parse. Only a file that is no drop at
all (unreadable, not Parquet, a required column absent from every row) is refused whole. Arrow
parses a JSON-lines drop in one go; when some line defeats it, the file is read again line by
line, so that only the lines at fault are set aside (with the line as given).
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ingest.tables import GRAPH_RUNS, OP_RUNS
from storage.warehouse import TableSchema, split_rows
from vocabulary.errors import first_line

BATCH_ROWS = 1 << 20
MAX_CHIPS = 1 << 20
MAX_SECONDS_PER_DAY = 86_400.0
MAX_SPEEDUP = 100.0
EARLIEST_DATE = datetime.date(2015, 1, 1)
MAX_LINE_CHARS = 1 << 16  # of a bad JSON line kept in quarantine
LINE_BATCH_ROWS = 1 << 16  # read line by line, a row is Python objects: fewer at a time
_HEX32 = r"^[0-9a-f]{32}$"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class DropError(ValueError):
    """A drop that cannot be read at all (wrong schema, corrupt file)."""


@dataclass(frozen=True)
class DropFormat:
    """One kind of drop: its input columns and the warehouse table it fills."""

    kind: str
    table: TableSchema
    required: pa.Schema
    optional: pa.Schema

    @property
    def columns(self) -> pa.Schema:
        """Every column a drop of this kind may have, required ones first."""
        return pa.schema(list(self.required) + list(self.optional))


@dataclass(frozen=True)
class DropBatch:
    """Rows of a drop in its declared types. `notes` says per row what could not be read (a
    value of the wrong type, a bad date, a line that is not JSON; null where nothing was
    wrong); `lines` holds the JSON lines as given when the file was read line by line."""

    rows: pa.Table
    notes: pa.Array
    lines: pa.Array | None = None


_STRING, _HEX = pa.string(), pa.string()

GRAPH_RUNS_DROP = DropFormat(
    kind="graph_runs",
    table=GRAPH_RUNS,
    required=pa.schema([("dt", pa.date32()), ("job_id", _STRING), ("team", _STRING),
                        ("fingerprint", _HEX), ("env_key", _HEX), ("device_kind", _STRING),
                        ("chips", pa.int64()), ("executions", pa.int64()), ("seconds", pa.float64())]),
    optional=pa.schema([("compiler_version", _STRING), ("opted_out", pa.bool_()),
                        ("config_key", _STRING), ("config_version", pa.int64()),
                        ("expected_speedup", pa.float64()), ("holdout", pa.bool_())]),
)

OP_RUNS_DROP = DropFormat(
    kind="op_runs",
    table=OP_RUNS,
    required=pa.schema([("dt", pa.date32()), ("job_id", _STRING), ("team", _STRING), ("op_fingerprint", _HEX),
                        ("graph_fingerprint", _HEX), ("env_key", _HEX), ("chip_seconds", pa.float64())]),
    optional=pa.schema([("opted_out", pa.bool_()), ("config_key", _STRING),
                        ("config_version", pa.int64()), ("expected_speedup", pa.float64())]),
)

FORMATS = (GRAPH_RUNS_DROP, OP_RUNS_DROP)


def drop_format(path: Path) -> DropFormat | None:
    """The drop format a file's name declares, or None if it is not a drop."""
    for fmt in FORMATS:
        if path.name.endswith((f".{fmt.kind}.parquet", f".{fmt.kind}.jsonl")):
            return fmt
    return None


def read_batches(path: Path, fmt: DropFormat) -> Iterator[DropBatch]:
    """The drop's rows in batches, in the drop's declared types; DropError if it is no drop."""
    try:
        # Opened here, not by Arrow: Arrow takes paths as UTF-8, and a file's name may be any bytes.
        with open(path, "rb") as handle:
            if path.name.endswith(".jsonl"):
                yield from _jsonl_batches(handle, path, fmt)
                return
            source = pq.ParquetFile(handle)
            _check_columns(path, fmt, source.schema_arrow.names)
            present = [f.name for f in fmt.columns if f.name in source.schema_arrow.names]
            for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=present):
                yield _typed(pa.Table.from_batches([batch]), fmt)
    except (*_ARROW_ERRORS, OSError) as exc:
        raise DropError(f"{path}: not a readable {fmt.kind} drop: {first_line(exc)}") from None


def validate(batch: DropBatch, fmt: DropFormat) -> tuple[pa.Table, pa.Table, list[str]]:
    """(good rows as warehouse rows, bad rows as given, a reason per bad row). A row that could
    not be read is told by its note alone: its other checks fail for the same cause."""
    rows = batch.rows if batch.lines is None else batch.rows.append_column("line", batch.lines)
    good, bad, reasons = split_rows(rows, _checks(batch.rows, fmt), batch.notes)
    return _to_warehouse(good.select(fmt.columns.names), fmt), bad, reasons


def _checks(batch: pa.Table, fmt: DropFormat) -> list[tuple[str, pa.ChunkedArray]]:
    """Every row check: the table's own (present, finite, within bounds), then the drop's
    ranges. A range check passes a null: the table's check already names it missing."""
    today = datetime.date.today() + datetime.timedelta(days=1)
    checks = fmt.table.row_checks(batch)
    dt = batch.column("dt")
    checks += [
        ("dt outside 2015-01-01 .. tomorrow",
         _or_null(dt, pc.and_(pc.greater_equal(dt, pa.scalar(EARLIEST_DATE)),
                              pc.less_equal(dt, pa.scalar(today))))),
        ("job_id empty", _or_null(batch.column("job_id"), pc.greater(pc.utf8_length(batch.column("job_id")), 0))),
    ]
    for name in ("fingerprint", "env_key", "op_fingerprint", "graph_fingerprint"):
        if name in batch.column_names:
            checks.append((f"{name} is not 32 lowercase hex digits",
                           _or_null(batch.column(name), pc.match_substring_regex(batch.column(name), _HEX32))))
    config_key = batch.column("config_key")
    checks.append(("config_key is not 32 lowercase hex digits",
                   _or_null(config_key, pc.match_substring_regex(config_key, _HEX32))))
    version = batch.column("config_version")
    checks.append(("config_version not positive", _or_null(version, pc.greater(version, 0))))
    speedup = batch.column("expected_speedup")
    checks.append((f"expected_speedup not in (0, {MAX_SPEEDUP:.0f}]",
                   _or_null(speedup, pc.and_(pc.greater(speedup, 0.0), pc.less_equal(speedup, MAX_SPEEDUP)))))
    if fmt is GRAPH_RUNS_DROP:
        chips, seconds = batch.column("chips"), batch.column("seconds")
        holdout = pc.fill_null(batch.column("holdout"), False)
        checks += [
            ("holdout without a config_key", pc.or_(pc.invert(holdout), pc.is_valid(config_key))),
            (f"chips outside 1 .. {MAX_CHIPS}",
             _or_null(chips, pc.and_(pc.greater_equal(chips, 1), pc.less_equal(chips, MAX_CHIPS)))),
            ("executions negative",
             _or_null(batch.column("executions"), pc.greater_equal(batch.column("executions"), 0))),
            (f"seconds not a number in 0 .. {MAX_SECONDS_PER_DAY:.0f}",
             pc.and_(pc.greater_equal(seconds, 0.0), pc.less_equal(seconds, MAX_SECONDS_PER_DAY))),
        ]
    else:
        chip_seconds = batch.column("chip_seconds")
        checks.append((f"chip_seconds not a number in 0 .. {MAX_CHIPS * MAX_SECONDS_PER_DAY:.0f}",
                       _or_null(chip_seconds, pc.and_(pc.greater_equal(chip_seconds, 0.0),
                                                      pc.less_equal(chip_seconds, MAX_CHIPS * MAX_SECONDS_PER_DAY)))))
    return checks


def _or_null(values: pa.ChunkedArray, ok: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.or_kleene(pc.is_null(values), ok)


def _to_warehouse(good: pa.Table, fmt: DropFormat) -> pa.Table:
    if fmt is GRAPH_RUNS_DROP:
        chip_seconds = pc.multiply(pc.cast(good.column("chips"), pa.float64()), good.column("seconds"))
        good = good.append_column("chip_seconds", chip_seconds)
    return fmt.table.conform(good)


def _typed(table: pa.Table, fmt: DropFormat, notes: list[str | None] | None = None) -> DropBatch:
    """All drop columns present (optional ones null when absent, opted_out false), in declared types.
    A value that does not convert becomes null and notes its row, as does a date that does not
    parse; `notes` are earlier ones to keep."""
    notes = notes or [None] * table.num_rows
    columns = []
    for field in fmt.columns:
        if field.name not in table.column_names:
            fill = pa.scalar(False) if field.name == "opted_out" else pa.scalar(None, field.type)
            columns.append(pa.repeat(fill, table.num_rows).cast(field.type))
            continue
        values = table.column(field.name)
        if field.name == "dt" and pa.types.is_string(values.type):
            values = _parse_dates(values, notes)
        else:
            values = _cast(values, field, notes)
        if field.name == "opted_out":
            values = pc.fill_null(values, False)
        columns.append(values)
    return DropBatch(pa.Table.from_arrays(columns, schema=fmt.columns),
                     pa.array(notes, pa.string()))


def _parse_dates(values: pa.ChunkedArray, notes: list[str | None]) -> pa.ChunkedArray:
    parsed = pc.strptime(values, format="%Y-%m-%d", unit="s", error_is_null=True)
    # Arrow's strptime takes 2026-1-5, and rolls 2026-02-30 over to March 2: a date must have
    # the form, and keep its day.
    form = pc.fill_null(pc.match_substring_regex(values, _DATE), False)
    day = pc.cast(pc.if_else(form, pc.utf8_slice_codeunits(values, 8, 10), "0"), pa.int64())
    exact = pc.and_(form, pc.equal(pc.day(parsed), day))
    bad = pc.and_(pc.is_valid(values), pc.invert(pc.fill_null(exact, False)))
    for i in pc.indices_nonzero(bad).to_pylist():
        _note(notes, i, f"dt: {_shown(values[i].as_py())} is not a date YYYY-MM-DD")
    return pc.if_else(bad, pa.scalar(None, pa.date32()), pc.cast(parsed, pa.date32()))


def _cast(values: pa.ChunkedArray, field: pa.Field, notes: list[str | None]) -> pa.ChunkedArray:
    """`values` cast to the field's type; value by value only when the column does not cast
    as a whole (then each value that does not is null, and noted)."""
    try:
        return values.cast(field.type)
    except _ARROW_ERRORS:
        pass
    cast = []
    for i, value in enumerate(values):
        try:
            cast.append(value.cast(field.type).as_py())
        except _ARROW_ERRORS:
            cast.append(None)
            _note(notes, i, f"{field.name}: {_shown(value.as_py())} is not {field.type}")
    return pa.chunked_array([pa.array(cast, field.type)])


def _jsonl_batches(handle: BinaryIO, path: Path, fmt: DropFormat) -> Iterator[DropBatch]:
    as_read = fmt.columns.set(fmt.columns.get_field_index("dt"), pa.field("dt", pa.string()))
    try:
        table = pa_json.read_json(handle, parse_options=pa_json.ParseOptions(
            explicit_schema=as_read, unexpected_field_behavior="ignore"))
    except _ARROW_ERRORS:
        handle.seek(0)
        yield from _jsonl_by_line(handle, path, fmt, as_read)
        return
    # An explicit schema turns absent fields into all-null columns.
    _check_columns(path, fmt, [f.name for f in table.schema
                               if table.column(f.name).null_count < table.num_rows])
    for batch in table.to_batches(BATCH_ROWS):
        yield _typed(pa.Table.from_batches([batch]), fmt)


def _jsonl_by_line(handle: BinaryIO, path: Path, fmt: DropFormat, as_read: pa.Schema) -> Iterator[DropBatch]:
    """A JSON-lines drop that Arrow refused, read line by line: each line that is no JSON
    object, or holds a value of the wrong type, becomes a row with a note."""
    numbered = ((n, raw) for n, raw in enumerate(handle, start=1) if raw.strip())
    while chunk := list(itertools.islice(numbered, LINE_BATCH_ROWS)):
        values: dict[str, list[Any]] = {f.name: [] for f in as_read}
        notes: list[str | None] = []
        present: set[str] = set()
        objects = 0
        for number, raw in chunk:
            row, problem = _parse_line(raw, as_read)
            objects += row is not None
            present.update(row or ())
            for name, column in values.items():
                column.append((row or {}).get(name))
            notes.append(f"line {number}: {problem}" if problem else None)
        if not objects:
            raise DropError(f"{path}: not JSON lines (lines {chunk[0][0]} .. {chunk[-1][0]})")
        _check_columns(path, fmt, sorted(present))
        parsed = pa.table({f.name: pa.array(values[f.name], f.type) for f in as_read})
        batch = _typed(parsed, fmt, notes)
        lines = pa.array([raw.decode("utf-8", errors="replace").rstrip("\n")[:MAX_LINE_CHARS]
                          for _, raw in chunk], pa.string())
        yield DropBatch(batch.rows, batch.notes, lines)


def _parse_line(raw: bytes, schema: pa.Schema) -> tuple[dict[str, Any] | None, str | None]:
    """(the line's values that fit their columns, or None if it is no JSON object; what was
    wrong with the line, if anything)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"not JSON: {first_line(exc)}"
    if not isinstance(data, dict):
        return None, "not JSON: not an object"
    row, problems = {}, []
    for field in schema:
        value = data.get(field.name)
        if value is None:
            continue
        if _fits(value, field.type):
            row[field.name] = value
        else:
            problems.append(f"{field.name}: {_shown(value)} is not {field.type}")
    return row, "; ".join(problems) or None


def _fits(value: Any, type_: pa.DataType) -> bool:
    """Whether a JSON value is one of `type_` (whole floats count as integers; 1e400 is not a
    number: JSON reads it as infinity, which is the range checks' to refuse for floats)."""
    if isinstance(value, bool) or pa.types.is_boolean(type_):
        return isinstance(value, bool) and pa.types.is_boolean(type_)
    if pa.types.is_string(type_):
        return isinstance(value, str)
    if pa.types.is_integer(type_):
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return whole and _INT64[0] <= value <= _INT64[1]
    if pa.types.is_floating(type_):
        return isinstance(value, float) or (isinstance(value, int) and _float_fits(value))
    return False


def _float_fits(value: int) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _note(notes: list[str | None], i: int, problem: str) -> None:
    notes[i] = problem if notes[i] is None else f"{notes[i]}; {problem}"


def _shown(value: Any) -> str:
    """A value for a reason: its repr, cut short (a bad value may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def _check_columns(path: Path, fmt: DropFormat, present: list[str]) -> None:
    missing = [f.name for f in fmt.required if f.name not in present]
    if missing:
        raise DropError(f"{path}: wrong schema for a {fmt.kind} drop: missing columns {missing}")
