"""The dashboards' data: one query per `/api/` endpoint, over the warehouse and the config store.

Every query takes the data root and a date window and returns JSON-ready rows (dicts of str,
int, float, bool or None). The page's charts and the endpoints call the same functions, so a
chart shows exactly what its endpoint returns. Warehouse tables are read through
`Warehouse.read` (each file's table, version and columns checked), only the window's
partitions, then summed with DuckDB; a table nobody has written yet reads as no rows. Chip-time
is in chip-hours (chip-seconds / 3600), shares and rates are fractions in [0, 1].
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import duckdb
import pyarrow as pa

from delivery.store import Store
from ingest.tables import GRAPH_RUNS, GRAPHS, HITS, OP_RUNS, OPS
from ingest.warehouse import TableSchema, Warehouse
from ranking.tables import COVERAGE, SAVINGS
from tuner.tables import TRIALS, TUNING_RESULTS
from validator.tables import VALIDATIONS

Row = dict[str, Any]
TOP_KEYS = 10  # keys per kind in /api/top
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Window:
    """The dates a dashboard covers, both ends included."""

    first: datetime.date
    last: datetime.date

    @classmethod
    def last_days(cls, days: int, last: datetime.date | None = None) -> Window:
        """The `days` days ending on `last` (default: today, as the other stages date their rows)."""
        last = last or datetime.date.today()
        return cls(last - datetime.timedelta(days=days - 1), last)

    def holds(self, dt: str) -> bool:
        """Whether partition `dt` (YYYY-MM-DD) is inside the window."""
        return self.first.isoformat() <= dt <= self.last.isoformat()


def savings(home: Path, window: Window) -> list[Row]:
    """Chip-time saved per day, config kind and team (the `savings` table, summed over config
    versions)."""
    return _query("""
        select dt, kind, team,
               sum(chip_seconds_saved) as chip_seconds_saved,
               sum(chip_seconds_saved) / 3600 as chip_hours_saved,
               sum(hit_chip_seconds) / 3600 as hit_chip_hours
        from savings group by dt, kind, team order by dt, kind, team
    """, savings=_read(home, SAVINGS, window))


def hits(home: Path, window: Window) -> list[Row]:
    """Config hits per day: from the fleet's profiles (source 'profiles', per kind: runs and
    chip-time that ran with a tuned config) and from the compiler hook (source 'hook': compiles
    that applied a config). `hit_rate` is the hit share of chip-time for profiles and of
    compiles for the hook."""
    runs = ["dt", "chip_seconds", "config_key"]
    return _query("""
        with runs as (
            select dt, 'graph' as kind, chip_seconds, config_key from graph_runs
            union all
            select dt, 'op' as kind, chip_seconds, config_key from op_runs
        ), profiles as (
            select dt, kind, count(*) as runs, count(config_key) as hit_runs,
                   sum(chip_seconds) / 3600 as chip_hours,
                   coalesce(sum(chip_seconds) filter (where config_key is not null), 0) / 3600
                       as hit_chip_hours
            from runs group by dt, kind
        ), hook as (
            select dt, count(*) as runs, count(*) filter (where outcome = 'applied') as hit_runs
            from hook_hits group by dt
        )
        select dt, 'profiles' as source, kind, runs, hit_runs, chip_hours, hit_chip_hours,
               hit_chip_hours / nullif(chip_hours, 0) as hit_rate
        from profiles
        union all
        select dt, 'hook', 'graph', runs, hit_runs, null, null, hit_runs / runs from hook
        order by source desc, kind, dt
    """, graph_runs=_read(home, GRAPH_RUNS, window, runs), op_runs=_read(home, OP_RUNS, window, runs),
        hook_hits=_read(home, HITS, window, ["dt", "outcome"]))


def coverage(home: Path, window: Window) -> list[Row]:
    """Where fleet chip-time went per ranking date and kind, by coverage category (tuned,
    candidate, beyond_top_k, long_tail, missing_symbols, opted_out; see ranking.rank)."""
    return _query("""
        select dt, kind, category, keys, chip_seconds / 3600 as chip_hours, share
        from coverage order by dt, kind, category
    """, coverage=_read(home, COVERAGE, window))


def validations(home: Path, window: Window) -> list[Row]:
    """The validator's decisions per day and outcome (kept, rekeyed, invalidated, expired)."""
    return _query("""
        select dt, outcome, count(*) as entries, sum(fleet_hits) as fleet_hits,
               avg(age_days) as mean_age_days
        from validations group by dt, outcome order by dt, outcome
    """, validations=_read(home, VALIDATIONS, window))


def validator_hits(home: Path, window: Window) -> list[Row]:
    """Per day, the share of tuned chip-time (hits) served by entries the validator last
    updated, and what those entries saved."""
    return _query("""
        select dt,
               sum(hit_chip_seconds) / 3600 as hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0) / 3600
                   as validator_hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0)
                   / nullif(sum(hit_chip_seconds), 0) as validator_share,
               coalesce(sum(chip_seconds_saved) filter (where validator_updated), 0) / 3600
                   as validator_chip_hours_saved
        from savings group by dt order by dt
    """, savings=_read(home, SAVINGS, window))


def staleness(home: Path, window: Window) -> list[Row]:
    """The live store's entries with their age (days since measured) and days to expiry, as
    of the end of the window (today for the default window)."""
    now = min(datetime.datetime.now(datetime.UTC),
              datetime.datetime.combine(window.last, datetime.time.max, datetime.UTC))
    rows = []
    for entry in Store(home).entries().to_pylist():
        measured = entry["measured_at"]
        rows.append({
            "key": entry["key"], "fingerprint": entry["fingerprint"], "kind": entry["kind"],
            "provenance": entry["provenance"], "speedup": entry["speedup"],
            "ci_low": entry["ci_low"], "ci_high": entry["ci_high"],
            "compiler_version": entry["compiler_version"],
            "measured_at": measured.isoformat() if measured else None,
            "age_days": (now - measured).total_seconds() / SECONDS_PER_DAY if measured else None,
            "expires_in_days": (entry["expires_at"] - now).total_seconds() / SECONDS_PER_DAY,
        })
    return sorted(rows, key=lambda r: (r["age_days"] is None, -(r["age_days"] or 0), r["key"]))


def top(home: Path, window: Window) -> list[Row]:
    """The TOP_KEYS costliest graph and op keys of the window (chip-time of jobs that accept
    tuning), with the live store entry's speedup and 99% interval where one is tuned, and the
    chip-time its hits saved."""
    graph_runs = _read(home, GRAPH_RUNS, window, ["fingerprint", "env_key", "chip_seconds", "opted_out",
                                                  "config_key", "expected_speedup"])
    op_runs = _read(home, OP_RUNS, window, ["op_fingerprint", "env_key", "chip_seconds", "opted_out",
                                            "config_key", "expected_speedup"])
    return _query("""
        with runs as (
            select 'graph' as kind, fingerprint, env_key, chip_seconds, config_key, expected_speedup
            from graph_runs where not opted_out
            union all
            select 'op', op_fingerprint, env_key, chip_seconds, config_key, expected_speedup
            from op_runs where not opted_out
        ), per_key as (
            select kind, fingerprint, env_key, sum(chip_seconds) as chip_seconds,
                   coalesce(sum(chip_seconds * (expected_speedup - 1))
                            filter (where config_key is not null), 0) as saved
            from runs group by kind, fingerprint, env_key
        ), ranked as (
            select *, chip_seconds / sum(chip_seconds) over (partition by kind) as share,
                   row_number() over (partition by kind order by chip_seconds desc, fingerprint, env_key)
                       as rank
            from per_key
        )
        select r.kind, r.rank, r.fingerprint, r.env_key, n.name, r.chip_seconds / 3600 as chip_hours,
               r.share, r.saved / 3600 as chip_hours_saved, e.key is not null as tuned, e.key,
               e.speedup, e.ci_low, e.ci_high, e.provenance
        from ranked r
        left join names n using (kind, fingerprint)
        left join entries e using (kind, fingerprint, env_key)
        where r.rank <= ? order by r.kind, r.rank
    """, [TOP_KEYS], graph_runs=graph_runs, op_runs=op_runs, names=_names(home),
        entries=Store(home).entries().select(["key", "kind", "fingerprint", "env_key", "speedup",
                                              "ci_low", "ci_high", "provenance"]))


def tuner(home: Path, window: Window) -> list[Row]:
    """Every tuning trial of the window in search order, with the best verified-numerics
    speedup its task had found so far."""
    return _query("""
        select dt, task_id, kind, fingerprint, env_key, strategy, index, outcome, speedup, ci_low, ci_high,
               numerics_ok,
               max(speedup) filter (where outcome = 'measured' and numerics_ok)
                   over (partition by task_id order by index
                         rows between unbounded preceding and current row) as best_so_far
        from trials order by task_id, index
    """, trials=_read(home, TRIALS, window, [f.name for f in TRIALS.schema if f.name != "config"]))


def tuning_results(home: Path, window: Window) -> list[Row]:
    """One row per tuning task of the window: its verdict and the verified speedup with its
    99% interval."""
    return _query("""
        select t.dt, t.task_id, t.kind, t.fingerprint, t.env_key, n.name, t.status, t.accepted,
               t.speedup, t.ci_low, t.ci_high, t.numerics_ok, t.strategy, t.evaluations, t.measured
        from results t left join names n using (kind, fingerprint)
        order by t.dt, t.task_id
    """, results=_read(home, TUNING_RESULTS, window), names=_names(home))


def store_versions(home: Path, window: Window) -> list[Row]:
    """Every published store version (not windowed: the store's whole history is short)."""
    store = Store(home)
    live = store.current()
    return [{"version": m.version, "parent": m.parent, "created": m.created, "reason": m.reason,
             "graph_entries": m.counts.get("graph", 0), "op_entries": m.counts.get("op", 0),
             "entries": sum(m.counts.values()), "compiler_versions": m.compiler_versions,
             "live": m.version == live} for m in store.versions()]


QUERIES: dict[str, Callable[[Path, Window], list[Row]]] = {
    "savings": savings,
    "hits": hits,
    "coverage": coverage,
    "validations": validations,
    "validator-hits": validator_hits,
    "staleness": staleness,
    "top": top,
    "tuner": tuner,
    "tuning-results": tuning_results,
    "store": store_versions,
}


def summary(rows: dict[str, list[Row]]) -> Row:
    """The headline figures, from the rows of the other queries."""
    graph_hits = [r for r in rows["hits"] if r["source"] == "profiles" and r["kind"] == "graph"]
    graph_coverage = [r for r in rows["coverage"] if r["kind"] == "graph"]
    last_ranking = max((r["dt"] for r in graph_coverage), default=None)
    live = [r for r in rows["store"] if r["live"]]
    return {
        "chip_hours_saved": sum(r["chip_hours_saved"] for r in rows["savings"]),
        "hit_rate": graph_hits[-1]["hit_rate"] if graph_hits else None,
        "hit_rate_dt": graph_hits[-1]["dt"] if graph_hits else None,
        "tuned_share": sum(r["share"] for r in graph_coverage
                           if r["dt"] == last_ranking and r["category"] == "tuned") if last_ranking else None,
        "live_version": live[0]["version"] if live else None,
        "live_entries": live[0]["entries"] if live else 0,
        "tasks": len(rows["tuning-results"]),
        "tasks_accepted": sum(1 for r in rows["tuning-results"] if r["accepted"]),
        "validations": sum(r["entries"] for r in rows["validations"]),
    }


def run_all(home: Path, window: Window) -> dict[str, list[Row]]:
    """Every query's rows for `window`."""
    return {name: query(home, window) for name, query in QUERIES.items()}


def _read(home: Path, table: TableSchema, window: Window, columns: list[str] | None = None) -> pa.Table:
    return Warehouse(home).read(table, columns, filter_dt=window.holds)


def _names(home: Path) -> pa.Table:
    """A readable name per graph (its module) and op (its kind and fusion name)."""
    return _arrow("""
        select 'graph' as kind, fingerprint, min(module_name) as name from graphs group by fingerprint
        union all
        select 'op', fingerprint, min(kind || ' ' || name) from ops group by fingerprint
    """, graphs=Warehouse(home).read(GRAPHS, ["fingerprint", "module_name"]),
        ops=Warehouse(home).read(OPS, ["fingerprint", "kind", "name"]))


def _connect(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    for name, table in tables.items():
        connection.register(name, table)
    return connection


def _arrow(sql: str, **tables: pa.Table) -> pa.Table:
    with _connect(tables) as connection:
        result = connection.execute(sql).arrow()
        return result.read_all() if isinstance(result, pa.RecordBatchReader) else result


def _query(sql: str, params: list[Any] | None = None, **tables: pa.Table) -> list[Row]:
    with _connect(tables) as connection:
        cursor = connection.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [{k: _json_value(v) for k, v in zip(names, row)} for row in cursor.fetchall()]


def _json_value(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN is no JSON
        return None
    return value
