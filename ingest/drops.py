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
  applied config: config_key, config_version, expected_speedup (null when none was applied)

op_runs drop
  dt, job_id, team, env_key   as above
  op_fingerprint              32 hex
  graph_fingerprint           32 hex: the graph the op ran in
  chip_seconds                float, 0 .. chips x seconds bounds
  optional: opted_out and the hit metadata, as above

Rows are checked with vectorized compute; bad rows are quarantined with the reason and the
good rows land (chip_seconds = chips x seconds).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ingest.errors import first_line
from ingest.tables import GRAPH_RUNS, OP_RUNS
from ingest.warehouse import TableSchema

BATCH_ROWS = 1 << 20
MAX_CHIPS = 1 << 20
MAX_SECONDS_PER_DAY = 86_400.0
MAX_SPEEDUP = 100.0
EARLIEST_DATE = datetime.date(2015, 1, 1)
_HEX32 = r"^[0-9a-f]{32}$"


class DropError(ValueError):
    """A drop that cannot be read at all (wrong schema, corrupt file)."""


@dataclass(frozen=True)
class DropFormat:
    """One kind of drop: its input columns and the warehouse table it fills."""

    kind: str
    table: TableSchema
    required: pa.Schema
    optional: pa.Schema


_STRING, _HEX = pa.string(), pa.string()

GRAPH_RUNS_DROP = DropFormat(
    kind="graph_runs",
    table=GRAPH_RUNS,
    required=pa.schema([("dt", pa.date32()), ("job_id", _STRING), ("team", _STRING),
                        ("fingerprint", _HEX), ("env_key", _HEX), ("device_kind", _STRING),
                        ("chips", pa.int64()), ("executions", pa.int64()), ("seconds", pa.float64())]),
    optional=pa.schema([("compiler_version", _STRING), ("opted_out", pa.bool_()),
                        ("config_key", _STRING), ("config_version", pa.int64()),
                        ("expected_speedup", pa.float64())]),
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


def read_batches(path: Path, fmt: DropFormat) -> Iterator[pa.Table]:
    """The drop's rows in batches, cast to the drop's column types; DropError if unreadable."""
    full = pa.schema(list(fmt.required) + list(fmt.optional))
    try:
        if path.name.endswith(".jsonl"):
            as_read = full.set(full.get_field_index("dt"), pa.field("dt", pa.string()))
            table = pa_json.read_json(path, parse_options=pa_json.ParseOptions(
                explicit_schema=as_read, unexpected_field_behavior="ignore"))
            # An explicit schema turns absent fields into all-null columns.
            _check_columns(path, fmt, pa.schema(
                [f for f in table.schema if table.column(f.name).null_count < table.num_rows]))
            for batch in table.to_batches(BATCH_ROWS):
                yield _typed(pa.Table.from_batches([batch]), fmt)
            return
        source = pq.ParquetFile(path)
        _check_columns(path, fmt, source.schema_arrow)
        present = [f.name for f in full if f.name in source.schema_arrow.names]
        for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=present):
            yield _typed(pa.Table.from_batches([batch]), fmt)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise DropError(f"{path}: not a readable {fmt.kind} drop: {first_line(exc)}") from None


def validate(batch: pa.Table, fmt: DropFormat) -> tuple[pa.Table, pa.Table, list[str]]:
    """(good rows as warehouse rows, bad rows as given, a reason per bad row)."""
    checks = _checks(batch, fmt)
    bad_masks = [pc.fill_null(pc.invert(ok), True) for _, ok in checks]
    any_bad = bad_masks[0]
    for mask in bad_masks[1:]:
        any_bad = pc.or_(any_bad, mask)
    good = batch.filter(pc.invert(any_bad))
    bad = batch.filter(any_bad)
    reasons: list[str] = []
    if bad.num_rows:
        bad_flags = [m.filter(any_bad).to_pylist() for m in bad_masks]
        names = [name for name, _ in checks]
        reasons = ["; ".join(n for n, flags in zip(names, bad_flags) if flags[i])
                   for i in range(bad.num_rows)]
    return _to_warehouse(good, fmt), bad, reasons


def _checks(batch: pa.Table, fmt: DropFormat) -> list[tuple[str, pa.ChunkedArray]]:
    today = datetime.date.today() + datetime.timedelta(days=1)
    dt = batch.column("dt")
    checks = [
        ("dt missing or outside 2015-01-01 .. tomorrow",
         pc.and_(pc.greater_equal(dt, pa.scalar(EARLIEST_DATE)), pc.less_equal(dt, pa.scalar(today)))),
        ("job_id empty", pc.greater(pc.utf8_length(batch.column("job_id")), 0)),
    ]
    for name in ("fingerprint", "env_key", "op_fingerprint", "graph_fingerprint"):
        if name in batch.column_names:
            checks.append((f"{name} is not 32 lowercase hex digits",
                           pc.match_substring_regex(batch.column(name), _HEX32)))
    speedup = batch.column("expected_speedup")
    checks.append((f"expected_speedup not in (0, {MAX_SPEEDUP:.0f}]",
                   pc.or_kleene(pc.is_null(speedup),
                                pc.and_(pc.greater(speedup, 0.0), pc.less_equal(speedup, MAX_SPEEDUP)))))
    if fmt is GRAPH_RUNS_DROP:
        chips, seconds = batch.column("chips"), batch.column("seconds")
        checks += [
            (f"chips outside 1 .. {MAX_CHIPS}",
             pc.and_(pc.greater_equal(chips, 1), pc.less_equal(chips, MAX_CHIPS))),
            ("executions negative", pc.greater_equal(batch.column("executions"), 0)),
            (f"seconds not a number in 0 .. {MAX_SECONDS_PER_DAY:.0f}",
             pc.and_(pc.greater_equal(seconds, 0.0), pc.less_equal(seconds, MAX_SECONDS_PER_DAY))),
        ]
    else:
        chip_seconds = batch.column("chip_seconds")
        checks.append((f"chip_seconds not a number in 0 .. {MAX_CHIPS * MAX_SECONDS_PER_DAY:.0f}",
                       pc.and_(pc.greater_equal(chip_seconds, 0.0),
                               pc.less_equal(chip_seconds, MAX_CHIPS * MAX_SECONDS_PER_DAY))))
    return checks


def _to_warehouse(good: pa.Table, fmt: DropFormat) -> pa.Table:
    if fmt is GRAPH_RUNS_DROP:
        chip_seconds = pc.multiply(pc.cast(good.column("chips"), pa.float64()), good.column("seconds"))
        good = good.append_column("chip_seconds", chip_seconds)
    return fmt.table.conform(good)


def _typed(table: pa.Table, fmt: DropFormat) -> pa.Table:
    """All drop columns present (optional ones null or false when absent), in declared types."""
    dt_index = table.column_names.index("dt")
    if pa.types.is_string(table.schema.field(dt_index).type):  # unparsable dates become nulls
        parsed = pc.strptime(table.column(dt_index), format="%Y-%m-%d", unit="s", error_is_null=True)
        table = table.set_column(dt_index, "dt", pc.cast(parsed, pa.date32()))
    for field in fmt.optional:
        if field.name not in table.column_names:
            fill = pa.scalar(False) if field.type == pa.bool_() else pa.scalar(None, field.type)
            table = table.append_column(field, pa.repeat(fill, table.num_rows).cast(field.type))
    if "opted_out" in table.column_names:
        index = table.column_names.index("opted_out")
        table = table.set_column(index, "opted_out", pc.fill_null(table.column("opted_out"), False))
    full = pa.schema(list(fmt.required) + list(fmt.optional))
    return table.select(full.names).cast(full)


def _check_columns(path: Path, fmt: DropFormat, schema: pa.Schema) -> None:
    missing = [f.name for f in fmt.required if f.name not in schema.names]
    if missing:
        raise DropError(f"{path}: wrong schema for a {fmt.kind} drop: missing columns {missing}")
