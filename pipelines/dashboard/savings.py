"""The queries of what the tuned configs saved, as booked, and of the hits that saved it: chip-time
saved per day (ranking.savings, at the tuner's expected speedups), config hits from the fleet's
profiles and from the compiler hook, and the runs of each team. Realized savings, measured
against the entries' holdout arms, are holdouts.py's."""

from __future__ import annotations

from ingest.tables import GRAPH_RUNS, HITS, OP_RUNS
from pipelines.dashboard import sql
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from ranking.tables import SAVINGS
from storage.home import Home
from vocabulary.tuning import Kind


def savings(home: Home, scope: Scope) -> list[Row]:
    """Chip-time saved per day, config kind, team and config version (the store version that
    served the hits; null when the runs did not say): at run time (`chip_hours_saved`), at
    compile time (`compile_chip_hours_saved`, over `compile_hits` compiles; `compile_unmeasured`
    more claimed nothing, see ranking.savings) and both (`total_chip_hours_saved`). Rows
    written before compile time was accounted count none."""
    return sql.query(scope, """
        select dt, kind, team, config_version,
               sum(chip_seconds_saved) as chip_seconds_saved,
               sum(chip_seconds_saved) / 3600 as chip_hours_saved,
               coalesce(sum(compile_chip_seconds_saved), 0) / 3600 as compile_chip_hours_saved,
               (sum(chip_seconds_saved) + coalesce(sum(compile_chip_seconds_saved), 0)) / 3600
                   as total_chip_hours_saved,
               coalesce(sum(compile_hits), 0)::bigint as compile_hits,
               coalesce(sum(compile_unmeasured), 0)::bigint as compile_unmeasured,
               sum(hit_chip_seconds) / 3600 as hit_chip_hours
        from savings group by all order by dt, kind, team, config_version
    """, savings=sql.read(home, scope, SAVINGS))


def hits(home: Home, scope: Scope) -> list[Row]:
    """Config hits per day: from the fleet's profiles (source 'profiles', per kind: runs and
    chip-time that ran with a tuned config) and from the compiler hook (source 'hook': compiles
    that applied a config). `hit_rate` is the hit share of chip-time for profiles and of
    compiles for the hook."""
    runs = ["dt", "chip_seconds", "config_key"]
    return sql.query(scope, f"""
        with runs as (
            select dt, '{Kind.GRAPH}' as kind, chip_seconds, {sql.TUNED} as tuned from graph_runs
            union all
            select dt, '{Kind.OP}' as kind, chip_seconds, {sql.OP_TUNED} from op_runs
        ), profiles as (
            select dt, kind, count(*) as runs, count(*) filter (where tuned) as hit_runs,
                   sum(chip_seconds) / 3600 as chip_hours,
                   coalesce(sum(chip_seconds) filter (where tuned), 0) / 3600
                       as hit_chip_hours
            from runs group by dt, kind
        ), hook as (
            select dt, count(*) as runs, count(*) filter (where {sql.HOOK_TUNED}) as hit_runs
            from hook_hits group by dt
        )
        select dt, 'profiles' as source, kind, runs, hit_runs, chip_hours, hit_chip_hours,
               hit_chip_hours / nullif(chip_hours, 0) as hit_rate
        from profiles
        union all
        select dt, 'hook', '{Kind.GRAPH}', runs, hit_runs, null, null, hit_runs / runs from hook
        order by source desc, kind, dt
    """, graph_runs=sql.read(home, scope, GRAPH_RUNS, runs + ["holdout"]),
        op_runs=sql.read(home, scope, OP_RUNS, runs),
        hook_hits=sql.read(home, scope, HITS, ["dt", "outcome"]))


def teams(home: Home, scope: Scope) -> list[Row]:
    """Graph runs per team: runs, jobs, chip-time, and the chip-time that ran tuned or was
    opted out of tuning."""
    return sql.query(scope, f"""
        select team, count(*) as runs, count(distinct job_id) as jobs,
               sum(chip_seconds) / 3600 as chip_hours,
               coalesce(sum(chip_seconds) filter (where {sql.TUNED}), 0) / 3600 as hit_chip_hours,
               coalesce(sum(chip_seconds) filter (where opted_out), 0) / 3600 as opted_out_chip_hours
        from graph_runs group by team order by chip_hours desc, team
    """, graph_runs=sql.read(home, scope, GRAPH_RUNS, ["team", "job_id", "chip_seconds", "config_key",
                                                     "holdout", "opted_out"]))
