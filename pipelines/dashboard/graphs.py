"""The queries of the graphs: every graph that ran in the window by its fleet cost, with its live
store entries, and the graphs ingested (the symbols)."""

from __future__ import annotations

from ingest.tables import GRAPH_RUNS, GRAPHS
from pipelines.dashboard import lookups, sql
from pipelines.dashboard.levels import ENTRY_LEVELS
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from storage.home import Home
from storage.warehouse import Warehouse
from vocabulary.tuning import Kind


def graphs(home: Home, scope: Scope) -> list[Row]:
    """Every graph that ran in the window, costliest first: its fleet cost (chip-time of all
    its runs, opted out of tuning or not) and share of the graphs' chip-time, runs, jobs, teams,
    environments (`env_key`: the costliest), the share of its chip-time that ran tuned, and its
    live store entries for the environments it ran in, with the speedup and interval of the
    entry in its costliest tuned environment (`entry_env_key`, labelled `entry_environment`)."""
    rows = sql.query(scope, f"""
        with per_env as (
            select fingerprint, env_key, sum(chip_seconds) as chip_seconds
            from graph_runs group by fingerprint, env_key
        ), ranked as (  -- each graph's environments costliest first, those with an entry apart
            select p.*, e.key, e.speedup, e.ci_low, e.ci_high, e.provenance,
                   row_number() over (partition by p.fingerprint order by p.chip_seconds desc, p.env_key) as env_rank,
                   row_number() over (partition by p.fingerprint, e.key is null
                                      order by p.chip_seconds desc, p.env_key) as entry_rank
            from per_env p left join entries e
                on e.kind = '{Kind.GRAPH}' and e.fingerprint = p.fingerprint and e.env_key = p.env_key
        ), per_graph as (
            select fingerprint, count(*) as environments, count(key) as entries,
                   any_value(env_key) filter (where env_rank = 1) as env_key
            from ranked group by fingerprint
        ), runs as (
            select fingerprint, sum(chip_seconds) as chip_seconds, count(*) as runs,
                   count(distinct job_id) as jobs, count(distinct team) as teams,
                   coalesce(sum(chip_seconds) filter (where {sql.TUNED}), 0) as hit_chip_seconds
            from graph_runs group by fingerprint
        )
        select r.fingerprint, n.name, r.chip_seconds, r.chip_seconds / 3600 as chip_hours,
               r.chip_seconds / sum(r.chip_seconds) over () as share,
               r.hit_chip_seconds / nullif(r.chip_seconds, 0) as hit_share,
               r.runs, r.jobs, r.teams, g.environments, g.env_key, g.entries > 0 as tuned, g.entries,
               t.env_key as entry_env_key, t.speedup, t.ci_low, t.ci_high, t.provenance
        from runs r join per_graph g using (fingerprint)
        left join ranked t on t.fingerprint = r.fingerprint and t.key is not null and t.entry_rank = 1
        left join names n on n.kind = '{Kind.GRAPH}' and n.fingerprint = r.fingerprint
        order by r.chip_seconds desc, r.fingerprint
    """, graph_runs=sql.read(home, scope, GRAPH_RUNS, ["fingerprint", "env_key", "chip_seconds", "job_id", "team",
                                                     "config_key", "holdout"]),
        names=lookups.names(home), entries=lookups.entries(home))
    return [{**row, "entry_environment": row["entry_env_key"] and scope.label(row["entry_env_key"]),
             "ci_level": ENTRY_LEVELS.get(row["provenance"])} for row in rows]


def symbols(home: Home, scope: Scope) -> list[Row]:
    """The graphs ingested (symbols), one row per graph and environment: the module, its size,
    when it was first and last seen. Not windowed: symbols are kept once per key."""
    return sql.query(scope, """
        select fingerprint, env_key, module_name, n_instructions, platform, device_kind, device_count,
               compiler_version, first_seen, last_seen
        from graphs order by module_name, fingerprint, device_kind, device_count, compiler_version, env_key
    """, graphs=scope.select(Warehouse(home).read(GRAPHS, [f.name for f in GRAPHS.schema if f.name not in (
        "hlo_blob", "optimized_blob", "optimized_fingerprint")])))
