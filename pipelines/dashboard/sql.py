"""The queries' plumbing: a table of the warehouse read for a scope (each file's table, version
and columns checked by `Warehouse.read`, only the window's partitions, narrowed by the scope),
DuckDB over such tables, and its rows made JSON-ready (dicts of str, int, float, bool or None;
dates as ISO text, NaN as null; a row with an `env_key` also has its `environment` label).

Also the SQL predicates of a run that ran tuned (`ingest.ran_tuned`, the rule of
`vocabulary.hits`), which the queries of hits, teams, top keys and graphs share.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import duckdb
import pyarrow as pa

from ingest.ran_tuned import ran_tuned_sql, sql_list
from pipelines.dashboard.scope import Scope
from storage.home import Home
from storage.warehouse import TableSchema, Warehouse
from vocabulary.hits import RAN_TUNED

Row = dict[str, Any]

# A run that ran with a tuned config (ingest.ran_tuned): graph runs of an entry's holdout arm ran
# the defaults, and count as runs of the key, never as tuned chip-time; op runs have no holdout
# arm. A hook's compile that ran tuned, by its outcome.
TUNED = ran_tuned_sql()
OP_TUNED = ran_tuned_sql(holdout=False)
HOOK_TUNED = f"outcome in {sql_list(RAN_TUNED)}"


def read(home: Home, scope: Scope, table: TableSchema, columns: list[str] | None = None,
         holds: Callable[[str], bool] | None = None) -> pa.Table:
    """The window's rows (those of the partitions that `holds`, when given) of `table` that the
    scope selects, with `columns` (default: all)."""
    wanted = columns or table.schema.names
    narrowing = [c for c in scope.columns(table.schema.names) if c not in wanted]
    rows = Warehouse(home).read(table, wanted + narrowing, filter_dt=holds or scope.filters.window.holds)
    return scope.select(rows).select(wanted)


def arrow(sql: str, **tables: pa.Table) -> pa.Table:
    """The result of `sql` over `tables` (by name), as an Arrow table."""
    with _connect(tables) as connection:
        result = connection.execute(sql).arrow()
        return result.read_all() if isinstance(result, pa.RecordBatchReader) else result


def query(scope: Scope, sql: str, params: list[Any] | None = None, **tables: pa.Table) -> list[Row]:
    """The rows of `sql` over `tables`, each with an `env_key` given its environment's label."""
    with _connect(tables) as connection:
        cursor = connection.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        rows = [{k: json_value(v) for k, v in zip(names, row)} for row in cursor.fetchall()]
    if "env_key" in names:
        for row in rows:
            row["environment"] = scope.label(row["env_key"])
    return rows


def json_value(value: Any) -> Any:
    """`value` as JSON holds it: a date or time as ISO text, NaN as null."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN is no JSON
        return None
    return value


def _connect(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    for name, table in tables.items():
        connection.register(name, table)
    return connection
