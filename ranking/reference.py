"""The ranking and the savings as DuckDB SQL over the same warehouse: the reference that the
Beam pipelines are checked against (tests) and timed against (benchmarks)."""

from __future__ import annotations

import datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from ingest.ran_tuned import ran_tuned_sql, sql_list
from ingest.tables import GRAPHS
from ranking.rank import RankSettings
from ranking.savings import MIN_HOLDOUT_COMPILES, UNKNOWN_TEAM
from storage.warehouse import Warehouse
from vocabulary.hits import TRIED, HitOutcome
from vocabulary.tuning import Kind


def _scan(home: Path, table: str) -> str:
    return (f"read_parquet('{Path(home) / 'warehouse' / table}/*/*.parquet', "
            "hive_partitioning = true, union_by_name = true)")


def _arrow(result: duckdb.DuckDBPyConnection) -> pa.Table:
    """The result as an Arrow table (DuckDB 1.4+ hands out a reader, older versions a table)."""
    out = result.arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


def _has(home: Path, table: str) -> bool:
    return any((Path(home) / "warehouse" / table).glob("*/*.parquet"))


_RANK_SQL = """
with runs as (
    select {key} as fingerprint, {graph} as graph_fingerprint, env_key, opted_out, chip_seconds
    from {runs} where dt between ? and ?
), total as (select coalesce(sum(chip_seconds), 0) as s from runs),
per_graph as (
    select fingerprint, env_key, graph_fingerprint, sum(chip_seconds) as chip_seconds
    from runs where not opted_out group by all
), per_key as (
    select fingerprint, env_key, sum(chip_seconds) as chip_seconds,
           first(graph_fingerprint order by chip_seconds desc, graph_fingerprint) as graph_fingerprint
    from per_graph group by fingerprint, env_key
), symbols as (select distinct fingerprint, env_key from {symbols}),
classified as materialized (
    select k.*, k.chip_seconds / nullif(total.s, 0) as share,
        case when t.fingerprint is not null then 'tuned'
             when s.fingerprint is null then 'missing_symbols'
             when k.chip_seconds / nullif(total.s, 0) < ? then 'long_tail'
             else 'ranked' end as category
    from per_key k
    cross join total
    left join tuned t using (fingerprint, env_key)
    left join symbols s using (fingerprint, env_key)
), ranked as (
    select *, row_number() over (order by chip_seconds desc, fingerprint, env_key) as rank
    from classified where category = 'ranked'
)
select 'candidates' as part, fingerprint, env_key, graph_fingerprint, chip_seconds, share, rank,
       case when rank <= ? then 'candidate' else 'beyond_top_k' end as category
from ranked
union all
select 'keys', fingerprint, env_key, graph_fingerprint, chip_seconds, share, null, category
from classified where category != 'ranked'
union all
select 'opted_out', fingerprint, env_key, null, sum(chip_seconds), null, null, 'opted_out'
from runs where opted_out group by fingerprint, env_key
"""


def reference_rank(home: Path, settings: RankSettings, tuned: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(candidates, coverage) by SQL: the same columns the Beam ranking writes (no `dt`)."""
    candidates, coverage = [], []
    with duckdb.connect() as db:
        db.register("tuned", tuned.select(["fingerprint", "env_key", "kind"]))
        for kind, runs, key, graph, symbols in (
                (Kind.GRAPH, "graph_runs", "fingerprint", "fingerprint", "graphs"),
                (Kind.OP, "op_runs", "op_fingerprint", "graph_fingerprint", "ops")):
            if not _has(home, runs):
                continue
            symbol_scan = _scan(home, symbols) if _has(home, symbols) else \
                "(select ''::varchar as fingerprint, ''::varchar as env_key where false)"
            db.execute(f"create or replace temp view tuned_kind as select * from tuned where kind = '{kind}'")
            sql = _RANK_SQL.format(key=key, graph=graph, runs=_scan(home, runs), symbols=symbol_scan)
            sql = sql.replace("left join tuned t", "left join tuned_kind t")
            rows = _arrow(db.execute(sql, [settings.first_day, settings.date, settings.min_share,
                                           settings.top_k]))
            (total,) = db.execute(f"select coalesce(sum(chip_seconds), 0) from {_scan(home, runs)} "
                                  "where dt between ? and ?", [settings.first_day, settings.date]).fetchone() or (0,)
            by_category: dict[str, tuple[int, float]] = {}
            for row in rows.to_pylist():
                keys, seconds = by_category.get(row["category"], (0, 0.0))
                by_category[row["category"]] = (keys + 1, seconds + row["chip_seconds"])
                if row["category"] == "candidate":
                    candidates.append({"kind": kind, **{k: row[k] for k in (
                        "fingerprint", "env_key", "graph_fingerprint", "chip_seconds", "share", "rank")}})
            for category, (keys, seconds) in by_category.items():
                coverage.append({"kind": kind, "category": category, "keys": keys,
                                 "chip_seconds": seconds, "share": seconds / total if total else 0.0})
    return pa.Table.from_pylist(candidates), pa.Table.from_pylist(coverage)


def reference_savings(home: Path, first: datetime.date, last: datetime.date,
                      validator_keys: list[str]) -> pa.Table:
    """Savings rows by SQL: the same columns the Beam savings pipeline writes (no rows: no
    columns either)."""
    parts = []
    # Runs of a holdout arm name their entry but ran with the defaults: no hit (graph runs only).
    for kind, runs, tuned in ((Kind.GRAPH, "graph_runs", ran_tuned_sql()),
                              (Kind.OP, "op_runs", ran_tuned_sql(holdout=False))):
        if _has(home, runs):
            parts.append(f"""
                select dt, '{kind}' as kind, team, env_key, config_version,
                       coalesce(list_contains($keys, config_key), false) as validator_updated,
                       chip_seconds as hit_chip_seconds,
                       chip_seconds * (coalesce(expected_speedup, 1) - 1) as chip_seconds_saved,
                       0 as compile_hits, 0 as compile_unmeasured, 0.0 as compile_chip_seconds_saved
                from {_scan(home, runs)}
                where dt between $first and $last and {tuned}""")
    if _has(home, "hits"):
        teams = (f"select job_id, min(team) as team from {_scan(home, 'graph_runs')} "
                 "where dt between $first and $last group by job_id") if _has(home, "graph_runs") else \
            "select ''::varchar as job_id, ''::varchar as team where false"
        # A process's devices: its local ones where the job was partitioned, else all of them.
        # `graphs` is read through the warehouse: files of schema version 1 lack `partitioning`.
        devices = ("select env_key, max(coalesce(json_extract(partitioning, '$.local_devices')::int, "
                   "device_count)) as device_count from graphs group by env_key")
        parts.append(f"""
            select h.dt, coalesce(h.kind, '{Kind.GRAPH}') as kind, coalesce(t.team, '{UNKNOWN_TEAM}') as team,
                   h.env_key, h.config_version,
                   coalesce(list_contains($keys, h.key), false) as validator_updated,
                   0.0 as hit_chip_seconds, 0.0 as chip_seconds_saved,
                   (coalesce(m.n, 0) >= {MIN_HOLDOUT_COMPILES})::int as compile_hits,
                   (coalesce(m.n, 0) < {MIN_HOLDOUT_COMPILES})::int as compile_unmeasured,
                   case when m.n >= {MIN_HOLDOUT_COMPILES}
                        then (m.median - tm.median) * coalesce(d.device_count, 1) else 0.0 end
                        as compile_chip_seconds_saved
            from hits h
            left join (select key, env_key, count(*) as n, median(compile_seconds) as median
                       from hits where outcome = '{HitOutcome.HOLDOUT}' group by key, env_key) m using (key, env_key)
            left join (select key, env_key, config_version, median(compile_seconds) as median
                       from hits where outcome in {sql_list(TRIED)} group by key, env_key, config_version) tm
                using (key, env_key, config_version)
            left join ({teams}) t using (job_id)
            left join ({devices}) d using (env_key)
            where h.outcome in {sql_list(TRIED)}""")
    if not parts:
        return pa.table({})
    sql = (f"with hits as (select * from {_scan(home, 'hits')} where dt between $first and $last) "
           if _has(home, "hits") else "")
    sql += ("select dt, kind, team, env_key, config_version, validator_updated, sum(hit_chip_seconds) as "
            "hit_chip_seconds, sum(chip_seconds_saved) as chip_seconds_saved, sum(compile_hits) as compile_hits, "
            "sum(compile_unmeasured) as compile_unmeasured, sum(compile_chip_seconds_saved) as "
            "compile_chip_seconds_saved from (" + " union all ".join(parts) + ") group by all "
            "order by dt, kind, team, env_key, config_version, validator_updated")
    with duckdb.connect() as db:
        db.register("graphs", Warehouse(home).read(GRAPHS, ["env_key", "device_count", "partitioning"]))
        return _arrow(db.execute(sql, {"keys": validator_keys, "first": first, "last": last}))
