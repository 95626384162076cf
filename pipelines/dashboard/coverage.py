"""The queries of where the fleet's chip-time went and how much of it the loop reaches: coverage
by category at each ranking (ranking.rank), the verified coverage each nightly run left
(ranking.verified_coverage), and the costliest keys of the window with their live entries."""

from __future__ import annotations

from ingest.tables import GRAPH_RUNS, OP_RUNS
from pipelines.dashboard import lookups, sql
from pipelines.dashboard.levels import ENTRY_LEVELS
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from pipelines.nightly import coverage_by_night
from ranking.tables import COVERAGE
from storage.home import Home
from vocabulary.tuning import Kind

TOP_KEYS = 10  # keys per kind in /api/top


def coverage(home: Home, scope: Scope) -> list[Row]:
    """Where fleet chip-time went per ranking date and kind, by coverage category (tuned,
    candidate, beyond_top_k, long_tail, missing_symbols, opted_out; see ranking.rank).
    Fleet-wide: the ranking counts keys of the whole fleet."""
    return sql.query(scope, """
        select dt, kind, category, keys, chip_seconds / 3600 as chip_hours, share
        from coverage order by dt, kind, category
    """, coverage=sql.read(home, scope, COVERAGE))


def top(home: Home, scope: Scope) -> list[Row]:
    """The TOP_KEYS costliest graph and op keys of the window (chip-time of jobs that accept
    tuning), with the live store entry's speedup and interval where one is tuned, and the
    chip-time its hits saved."""
    graph_runs = sql.read(home, scope, GRAPH_RUNS, ["fingerprint", "env_key", "chip_seconds", "opted_out",
                                                 "config_key", "expected_speedup", "holdout"])
    op_runs = sql.read(home, scope, OP_RUNS, ["op_fingerprint", "env_key", "chip_seconds", "opted_out",
                                           "config_key", "expected_speedup"])
    rows = sql.query(scope, f"""
        with runs as (
            select '{Kind.GRAPH}' as kind, fingerprint, env_key, chip_seconds, {sql.TUNED} as tuned, expected_speedup
            from graph_runs where not opted_out
            union all
            select '{Kind.OP}', op_fingerprint, env_key, chip_seconds, {sql.OP_TUNED}, expected_speedup
            from op_runs where not opted_out
        ), per_key as (
            select kind, fingerprint, env_key, sum(chip_seconds) as chip_seconds,
                   coalesce(sum(chip_seconds * (expected_speedup - 1))
                            filter (where tuned), 0) as saved
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
    """, [TOP_KEYS], graph_runs=graph_runs, op_runs=op_runs, names=lookups.names(home), entries=lookups.entries(home))
    return [{**row, "ci_level": ENTRY_LEVELS.get(row["provenance"])} for row in rows]


def verified_coverage(home: Home, scope: Scope) -> list[Row]:
    """The verified coverage each nightly run left, night by night: the share of the tunable
    chip-time (graphs the loop's machines can measure, jobs that did not opt out) whose key has
    a live config the loop measured, over the run's window (ranking.verified_coverage, as the
    run's savings stage recorded it). Fleet-wide and not windowed: nights count from the first."""
    return [{**night.to_json(), "tunable_chip_hours": night.tunable_chip_seconds / 3600,
             "covered_chip_hours": night.covered_chip_seconds / 3600}
            for night in coverage_by_night(home)]
