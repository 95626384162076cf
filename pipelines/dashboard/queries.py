"""The dashboards' data: one query per `/api/` endpoint, over the warehouse and the config store.

Every query takes the data root and a Scope (the filters, resolved: see scope.py) and returns
JSON-ready rows (dicts of str, int, float, bool or None). The pages' cards and the endpoints call
the same functions, so a card shows exactly what its endpoint returns. Warehouse tables are read
through `Warehouse.read` (each file's table, version and columns checked), only the window's
partitions, narrowed by the scope, then summed with DuckDB; a table nobody has written yet reads
as no rows. Chip-time is in chip-hours (chip-seconds / 3600), shares and rates are fractions in
[0, 1]. A row with an `env_key` also has its `environment` label, and a row with an interval its
`ci_level`: the confidence its measurement was taken at.

Booked savings use the tuner's expected speedup; realized ones the speedup the fleet showed
between the two arms of each entry's holdout (ranking.realized, over the same graph runs).
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from delivery.store_writer import Store
from ingest.tables import GRAPH_RUNS, GRAPHS, HITS, OP_RUNS, OPS
from pipelines.dashboard.scope import Scope
from pipelines.nightly import coverage_by_night
from ranking.cost import loop_cost as ranking_loop_cost
from ranking.cost import return_on_cost
from ranking.realized import RUN_COLUMNS, Realized, RealizedSavings, realized_speedups
from ranking.realized import realized_savings as ranking_realized_savings
from ranking.tables import COVERAGE, SAVINGS
from storage.home import Home
from storage.store_schema import entries_of
from storage.warehouse import TableSchema, Warehouse
from tuner.analyze import CONFIDENCE as FLAG_LEVEL
from tuner.analyze import analyze_trials
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS
from validator.tables import VALIDATIONS
from validator.validate import MEASURE_SETTINGS
from vocabulary.hits import RAN_TUNED, ran_tuned_sql, sql_list
from vocabulary.interval import columns

Row = dict[str, Any]
TOP_KEYS = 10  # keys per kind in /api/top
SECONDS_PER_DAY = 86400.0
# The confidence of each kind of interval: a tuning task's verification of its winner, its
# search's screens, the validator's re-measurement, and (FLAG_LEVEL) the flag analysis's
# bootstrap. A store entry's is its writer's; an imported entry's interval is as its owner gave
# it, at no stated level.
VERIFIED_LEVEL = VERIFY_SETTINGS.confidence
SCREENED_LEVEL = SEARCH_SETTINGS.confidence
VALIDATED_LEVEL = MEASURE_SETTINGS.confidence
ENTRY_LEVELS = {"tuner": VERIFIED_LEVEL, "validator": VALIDATED_LEVEL}
REALIZED_LEVEL = 0.99  # the confidence of the realized speedups' intervals over jobs



# A run that ran with a tuned config (vocabulary.hits): graph runs of an entry's holdout arm ran
# the defaults, and count as runs of the key, never as tuned chip-time; op runs have no holdout
# arm. A hook's compile that ran tuned, by its outcome.
TUNED = ran_tuned_sql()
OP_TUNED = ran_tuned_sql(holdout=False)
HOOK_TUNED = f"outcome in {sql_list(RAN_TUNED)}"

def savings(home: Home, scope: Scope) -> list[Row]:
    """Chip-time saved per day, config kind, team and config version (the store version that
    served the hits; null when the runs did not say): at run time (`chip_hours_saved`), at
    compile time (`compile_chip_hours_saved`, over `compile_hits` compiles; `compile_unmeasured`
    more claimed nothing, see ranking.savings) and both (`total_chip_hours_saved`). Rows
    written before compile time was accounted count none."""
    return _query(scope, """
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
    """, savings=_read(home, scope, SAVINGS))


def hits(home: Home, scope: Scope) -> list[Row]:
    """Config hits per day: from the fleet's profiles (source 'profiles', per kind: runs and
    chip-time that ran with a tuned config) and from the compiler hook (source 'hook': compiles
    that applied a config). `hit_rate` is the hit share of chip-time for profiles and of
    compiles for the hook."""
    runs = ["dt", "chip_seconds", "config_key"]
    return _query(scope, f"""
        with runs as (
            select dt, 'graph' as kind, chip_seconds, {TUNED} as tuned from graph_runs
            union all
            select dt, 'op' as kind, chip_seconds, {OP_TUNED} from op_runs
        ), profiles as (
            select dt, kind, count(*) as runs, count(*) filter (where tuned) as hit_runs,
                   sum(chip_seconds) / 3600 as chip_hours,
                   coalesce(sum(chip_seconds) filter (where tuned), 0) / 3600
                       as hit_chip_hours
            from runs group by dt, kind
        ), hook as (
            select dt, count(*) as runs, count(*) filter (where {HOOK_TUNED}) as hit_runs
            from hook_hits group by dt
        )
        select dt, 'profiles' as source, kind, runs, hit_runs, chip_hours, hit_chip_hours,
               hit_chip_hours / nullif(chip_hours, 0) as hit_rate
        from profiles
        union all
        select dt, 'hook', 'graph', runs, hit_runs, null, null, hit_runs / runs from hook
        order by source desc, kind, dt
    """, graph_runs=_read(home, scope, GRAPH_RUNS, runs + ["holdout"]),
        op_runs=_read(home, scope, OP_RUNS, runs),
        hook_hits=_read(home, scope, HITS, ["dt", "outcome"]))


def teams(home: Home, scope: Scope) -> list[Row]:
    """Graph runs per team: runs, jobs, chip-time, and the chip-time that ran tuned or was
    opted out of tuning."""
    return _query(scope, f"""
        select team, count(*) as runs, count(distinct job_id) as jobs,
               sum(chip_seconds) / 3600 as chip_hours,
               coalesce(sum(chip_seconds) filter (where {TUNED}), 0) / 3600 as hit_chip_hours,
               coalesce(sum(chip_seconds) filter (where opted_out), 0) / 3600 as opted_out_chip_hours
        from graph_runs group by team order by chip_hours desc, team
    """, graph_runs=_read(home, scope, GRAPH_RUNS, ["team", "job_id", "chip_seconds", "config_key",
                                                     "holdout", "opted_out"]))


def coverage(home: Home, scope: Scope) -> list[Row]:
    """Where fleet chip-time went per ranking date and kind, by coverage category (tuned,
    candidate, beyond_top_k, long_tail, missing_symbols, opted_out; see ranking.rank).
    Fleet-wide: the ranking counts keys of the whole fleet."""
    return _query(scope, """
        select dt, kind, category, keys, chip_seconds / 3600 as chip_hours, share
        from coverage order by dt, kind, category
    """, coverage=_read(home, scope, COVERAGE))


def validations(home: Home, scope: Scope) -> list[Row]:
    """The validator's decisions per day and outcome (kept, rekeyed, invalidated, expired)."""
    return _query(scope, """
        select dt, outcome, count(*) as entries, sum(fleet_hits) as fleet_hits,
               avg(age_days) as mean_age_days
        from validations group by dt, outcome order by dt, outcome
    """, validations=_read(home, scope, VALIDATIONS))


def decisions(home: Home, scope: Scope) -> list[Row]:
    """Each decision of the validator, latest first: the entry, the outcome and why, and the
    re-measured speedup with its interval."""
    rows = _query(scope, """
        select dt, validated_at, run_id, key, fingerprint, env_key, kind, outcome, reason, new_key,
               toolchain, compiler_version, speedup, ci_low, ci_high, numerics_ok, age_days,
               store_version
        from validations order by validated_at desc, key
    """, validations=_read(home, scope, VALIDATIONS))
    return [{**row, "ci_level": VALIDATED_LEVEL} for row in rows]


def validator_hits(home: Home, scope: Scope) -> list[Row]:
    """Per day, the share of tuned chip-time (hits) served by entries the validator last
    updated, and what those entries saved."""
    return _query(scope, """
        select dt,
               sum(hit_chip_seconds) / 3600 as hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0) / 3600
                   as validator_hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0)
                   / nullif(sum(hit_chip_seconds), 0) as validator_share,
               coalesce(sum(chip_seconds_saved) filter (where validator_updated), 0) / 3600
                   as validator_chip_hours_saved
        from savings group by dt order by dt
    """, savings=_read(home, scope, SAVINGS))


def staleness(home: Home, scope: Scope) -> list[Row]:
    """The live store's entries with their age (days since measured) and days to expiry, as
    of the end of the window (today for the default window)."""
    now = min(datetime.datetime.now(datetime.UTC),
              datetime.datetime.combine(scope.filters.window.last, datetime.time.max, datetime.UTC))
    rows = []
    for entry in entries_of(scope.select(Store(home).entries())):
        measured, expires = entry.measured_at, entry.expires_at
        rows.append({
            "key": entry.key, "fingerprint": entry.fingerprint, "env_key": entry.env_key,
            "environment": scope.label(entry.env_key), "kind": entry.kind,
            "provenance": entry.provenance, "speedup": entry.speedup,
            "ci_low": entry.ci_low, "ci_high": entry.ci_high,
            "ci_level": ENTRY_LEVELS.get(entry.provenance) if entry.provenance is not None else None,
            "compiler_version": entry.compiler_version, "config": entry.config,
            "measured_at": measured.isoformat() if measured else None,
            "age_days": (now - measured).total_seconds() / SECONDS_PER_DAY if measured else None,
            "expires_in_days": (expires - now).total_seconds() / SECONDS_PER_DAY if expires else None,
        })
    return sorted(rows, key=lambda r: (r["age_days"] is None, -(r["age_days"] or 0), r["key"]))


def top(home: Home, scope: Scope) -> list[Row]:
    """The TOP_KEYS costliest graph and op keys of the window (chip-time of jobs that accept
    tuning), with the live store entry's speedup and interval where one is tuned, and the
    chip-time its hits saved."""
    graph_runs = _read(home, scope, GRAPH_RUNS, ["fingerprint", "env_key", "chip_seconds", "opted_out",
                                                 "config_key", "expected_speedup", "holdout"])
    op_runs = _read(home, scope, OP_RUNS, ["op_fingerprint", "env_key", "chip_seconds", "opted_out",
                                           "config_key", "expected_speedup"])
    rows = _query(scope, f"""
        with runs as (
            select 'graph' as kind, fingerprint, env_key, chip_seconds, {TUNED} as tuned, expected_speedup
            from graph_runs where not opted_out
            union all
            select 'op', op_fingerprint, env_key, chip_seconds, {OP_TUNED}, expected_speedup
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
    """, [TOP_KEYS], graph_runs=graph_runs, op_runs=op_runs, names=_names(home), entries=_entries(home))
    return [{**row, "ci_level": ENTRY_LEVELS.get(row["provenance"])} for row in rows]


def graphs(home: Home, scope: Scope) -> list[Row]:
    """Every graph that ran in the window, costliest first: its fleet cost (chip-time of all
    its runs, opted out of tuning or not) and share of the graphs' chip-time, runs, jobs, teams,
    environments (`env_key`: the costliest), the share of its chip-time that ran tuned, and its
    live store entries for the environments it ran in, with the speedup and interval of the
    entry in its costliest tuned environment (`entry_env_key`, labelled `entry_environment`)."""
    rows = _query(scope, f"""
        with per_env as (
            select fingerprint, env_key, sum(chip_seconds) as chip_seconds
            from graph_runs group by fingerprint, env_key
        ), ranked as (  -- each graph's environments costliest first, those with an entry apart
            select p.*, e.key, e.speedup, e.ci_low, e.ci_high, e.provenance,
                   row_number() over (partition by p.fingerprint order by p.chip_seconds desc, p.env_key) as env_rank,
                   row_number() over (partition by p.fingerprint, e.key is null
                                      order by p.chip_seconds desc, p.env_key) as entry_rank
            from per_env p left join entries e
                on e.kind = 'graph' and e.fingerprint = p.fingerprint and e.env_key = p.env_key
        ), per_graph as (
            select fingerprint, count(*) as environments, count(key) as entries,
                   any_value(env_key) filter (where env_rank = 1) as env_key
            from ranked group by fingerprint
        ), runs as (
            select fingerprint, sum(chip_seconds) as chip_seconds, count(*) as runs,
                   count(distinct job_id) as jobs, count(distinct team) as teams,
                   coalesce(sum(chip_seconds) filter (where {TUNED}), 0) as hit_chip_seconds
            from graph_runs group by fingerprint
        )
        select r.fingerprint, n.name, r.chip_seconds, r.chip_seconds / 3600 as chip_hours,
               r.chip_seconds / sum(r.chip_seconds) over () as share,
               r.hit_chip_seconds / nullif(r.chip_seconds, 0) as hit_share,
               r.runs, r.jobs, r.teams, g.environments, g.env_key, g.entries > 0 as tuned, g.entries,
               t.env_key as entry_env_key, t.speedup, t.ci_low, t.ci_high, t.provenance
        from runs r join per_graph g using (fingerprint)
        left join ranked t on t.fingerprint = r.fingerprint and t.key is not null and t.entry_rank = 1
        left join names n on n.kind = 'graph' and n.fingerprint = r.fingerprint
        order by r.chip_seconds desc, r.fingerprint
    """, graph_runs=_read(home, scope, GRAPH_RUNS, ["fingerprint", "env_key", "chip_seconds", "job_id", "team",
                                                     "config_key", "holdout"]),
        names=_names(home), entries=_entries(home))
    return [{**row, "entry_environment": row["entry_env_key"] and scope.label(row["entry_env_key"]),
             "ci_level": ENTRY_LEVELS.get(row["provenance"])} for row in rows]


def realized(home: Home, scope: Scope) -> list[Row]:
    """Each store entry (key and store version) whose runs the window holds: the speedup
    expected of it and the one realized in the fleet (holdout arm against tuned arm) with its
    interval over jobs, whether that is decided and a regression (or why it is undecided), and
    each arm's jobs, runs and chip-hours; costliest tuned arm first."""
    return _realized_rows(_holdout_runs(home, scope), _graph_names(home), scope)


def realized_days(home: Home, scope: Scope) -> list[Row]:
    """`realized` per day of the window (`dt`): each entry's realized speedup over that day's
    runs alone, beside the one expected."""
    runs, names = _holdout_runs(home, scope), _graph_names(home)
    days = runs.column("dt")
    return [{"dt": day, **row} for day in scope.filters.window.days()
            for row in _realized_rows(runs.filter(pc.equal(days, pa.scalar(datetime.date.fromisoformat(day)))),
                                      names, scope)]


def realized_savings(home: Home, scope: Scope) -> list[Row]:
    """Booked beside realized chip-time saved (ranking.realized.realized_savings) by the
    window's tuned runs of store entries: one row for all of them (`slice`
    'total'), one per team and one per store version. Realized is at each entry's fleet-wide
    realized speedup, with its interval (the sums of the entries' bounds), over the decided
    entries; `booked_decided_chip_hours` is the booked figure of those same entries; undecided
    entries are counted, booked only."""
    runs = _holdout_runs(home, scope)
    breakdown = ranking_realized_savings(runs, realized_speedups(runs, confidence=REALIZED_LEVEL))
    return [_savings_row(name, part) for name, parts in (("total", [breakdown.total]), ("team", breakdown.by_team),
                                                          ("version", breakdown.by_version))
            for part in parts]


def loop_cost(home: Home, scope: Scope) -> list[Row]:
    """The loop's own cost in the window (ranking.cost: the tuner's task time, the validator's
    measuring time, and the savings the holdout arms forwent), in chip-hours, beside the
    realized savings, and their ratio: the return on cost (null when nothing was spent). One
    row. The tuner's time counts from each task's clock before the window, so its trials are
    read from before the window too."""
    last = scope.filters.window.last.isoformat()
    trials = _read(home, scope, TRIALS, ["dt", "task_id", "elapsed_seconds"], holds=lambda dt: dt <= last)
    runs = _holdout_runs(home, scope)
    found = realized_speedups(runs, confidence=REALIZED_LEVEL)
    cost = ranking_loop_cost(trials, _read(home, scope, VALIDATIONS, ["dt", "run_id", "validated_at"]), found,
                             scope.filters.window.first, scope.filters.window.last)
    realized = ranking_realized_savings(runs, found).total.realized
    saved = realized.estimate if realized is not None else None
    return [{"days": cost.days, "tuning_chip_hours": cost.tuning / 3600,
             "validation_chip_hours": cost.validation / 3600, "holdout_chip_hours": cost.holdout / 3600,
             "cost_chip_hours": cost.total / 3600, "realized_chip_hours": saved and saved / 3600,
             "return_on_cost": return_on_cost(saved, cost)}]


def tuner(home: Home, scope: Scope) -> list[Row]:
    """Every tuning trial of the window in search order, with its config and the best
    verified-numerics speedup its task had found so far."""
    rows = _query(scope, """
        select t.dt, t.task_id, t.kind, t.fingerprint, t.env_key, n.name, t.strategy, t.index, t.config,
               t.outcome, t.speedup, t.ci_low, t.ci_high, t.numerics_ok, t.compile_seconds, t.error,
               max(t.speedup) filter (where t.outcome = 'measured' and t.numerics_ok)
                   over (partition by t.task_id order by t.index
                         rows between unbounded preceding and current row) as best_so_far
        from trials t left join names n using (kind, fingerprint)
        order by t.task_id, t.index
    """, trials=_read(home, scope, TRIALS, [f.name for f in TRIALS.schema if f.name != "program"]),
        names=_names(home))
    return [{**row, "ci_level": SCREENED_LEVEL} for row in rows]


def tuning_results(home: Home, scope: Scope) -> list[Row]:
    """One row per tuning task of the window: its verdict and the verified speedup with its
    interval."""
    rows = _query(scope, """
        select t.dt, t.task_id, t.kind, t.fingerprint, t.env_key, n.name, t.status, t.accepted,
               t.config, t.speedup, t.ci_low, t.ci_high, t.numerics_ok, t.compiler_version, t.strategy,
               t.evaluations, t.measured
        from results t left join names n using (kind, fingerprint)
        order by t.dt, t.task_id
    """, results=_read(home, scope, TUNING_RESULTS), names=_names(home))
    return [{**row, "ci_level": VERIFIED_LEVEL} for row in rows]


def flags(home: Home, scope: Scope) -> list[Row]:
    """Which flags matter, from the window's trials (tuner.analyze, as `fdo analyze flags`):
    per flag its importance (mean |Shapley value| on log speedup) with a bootstrap interval,
    and per value its effect as a speed factor; most important first."""
    trials = _read(home, scope, TRIALS).to_pylist()
    results = _read(home, scope, TUNING_RESULTS).to_pylist()
    return [{**flag, "ci_level": FLAG_LEVEL} for flag in analyze_trials(trials, results).to_json()["flags"]]


def symbols(home: Home, scope: Scope) -> list[Row]:
    """The graphs ingested (symbols), one row per graph and environment: the module, its size,
    when it was first and last seen. Not windowed: symbols are kept once per key."""
    return _query(scope, """
        select fingerprint, env_key, module_name, n_instructions, platform, device_kind, device_count,
               compiler_version, first_seen, last_seen
        from graphs order by module_name, fingerprint, device_kind, device_count, compiler_version, env_key
    """, graphs=scope.select(Warehouse(home).read(GRAPHS, [f.name for f in GRAPHS.schema if f.name not in (
        "hlo_blob", "optimized_blob", "optimized_fingerprint")])))


def verified_coverage(home: Home, scope: Scope) -> list[Row]:
    """The verified coverage each nightly run left, night by night: the share of the tunable
    chip-time (graphs the loop's machines can measure, jobs that did not opt out) whose key has
    a live config the loop measured, over the run's window (ranking.verified_coverage, as the
    run's savings stage recorded it). Fleet-wide and not windowed: nights count from the first."""
    return [{**night.to_json(), "tunable_chip_hours": night.tunable_chip_seconds / 3600,
             "covered_chip_hours": night.covered_chip_seconds / 3600}
            for night in coverage_by_night(home)]


def store_versions(home: Home, scope: Scope) -> list[Row]:
    """Every published store version. Fleet-wide and not windowed: the store's whole history
    is short."""
    store = Store(home)
    live = store.current()
    return [{"version": m.version, "parent": m.parent, "created": m.created, "reason": m.reason,
             "graph_entries": m.counts.get("graph", 0), "op_entries": m.counts.get("op", 0),
             "entries": sum(m.counts.values()), "compiler_versions": m.compiler_versions,
             "live": m.version == live} for m in store.versions()]


Query = Callable[[Home, Scope], list[Row]]
QUERIES: dict[str, Query] = {
    "savings": savings,
    "hits": hits,
    "teams": teams,
    "coverage": coverage,
    "validations": validations,
    "decisions": decisions,
    "validator-hits": validator_hits,
    "staleness": staleness,
    "top": top,
    "graphs": graphs,
    "realized": realized,
    "realized-days": realized_days,
    "realized-savings": realized_savings,
    "loop-cost": loop_cost,
    "tuner": tuner,
    "tuning-results": tuning_results,
    "flags": flags,
    "symbols": symbols,
    "store": store_versions,
    "verified-coverage": verified_coverage,
}
# The filters a query's tables cannot be narrowed by (no such column, see scope.py): an
# endpoint refuses them rather than answer for more than was asked.
NOT_NARROWED: dict[str, frozenset[str]] = {
    "savings": frozenset({"graph", "entry"}),
    "validator-hits": frozenset({"graph", "entry"}),
    "coverage": frozenset({"team", "device_kind", "compiler_version", "graph", "entry"}),
    "store": frozenset({"team", "device_kind", "compiler_version", "graph", "entry"}),
    "verified-coverage": frozenset({"team", "device_kind", "compiler_version", "graph", "entry"}),
    **{name: frozenset({"entry"}) for name in ("tuner", "tuning-results", "flags", "symbols", "loop-cost")},
}


def summary(rows: dict[str, list[Row]]) -> Row:
    """The headline figures, from the rows of the other queries (the tuned coverage is the
    ranking's, the verified coverage the last nightly run's: both fleet-wide)."""
    graph_hits = [r for r in rows["hits"] if r["source"] == "profiles" and r["kind"] == "graph"]
    graph_coverage = [r for r in rows["coverage"] if r["kind"] == "graph"]
    last_ranking = max((r["dt"] for r in graph_coverage), default=None)
    live = [r for r in rows["store"] if r["live"]]
    night = rows["verified-coverage"][-1] if rows["verified-coverage"] else None
    return {
        **{name: sum(r[name] for r in rows["savings"])
           for name in ("chip_hours_saved", "compile_chip_hours_saved", "total_chip_hours_saved")},
        "hit_rate": graph_hits[-1]["hit_rate"] if graph_hits else None,
        "hit_rate_dt": graph_hits[-1]["dt"] if graph_hits else None,
        "tuned_share": sum(r["share"] for r in graph_coverage
                           if r["dt"] == last_ranking and r["category"] == "tuned") if last_ranking else None,
        "live_version": live[0]["version"] if live else None,
        "live_entries": live[0]["entries"] if live else 0,
        "tasks": len(rows["tuning-results"]),
        "tasks_accepted": sum(1 for r in rows["tuning-results"] if r["accepted"]),
        "validations": sum(r["entries"] for r in rows["validations"]),
        **{key: total[key] for total in rows["realized-savings"] if total["slice"] == "total"
           for key in ("booked_decided_chip_hours", "realized_chip_hours", "realized_low", "realized_high",
                       "decided_entries", "undecided_entries")},
        "regressed_entries": sum(r["regressed"] for r in rows["realized"]),
        "verified_coverage": night["share"] if night else None,
        "decided_coverage": night.get("decided_share") if night else None,
        "verified_coverage_nights": night["night"] if night else 0,
        "return_on_cost": rows["loop-cost"][0]["return_on_cost"] if rows["loop-cost"] else None,
        "cost_chip_hours": rows["loop-cost"][0]["cost_chip_hours"] if rows["loop-cost"] else None,
    }


SUMMARY_INPUTS = ("savings", "hits", "coverage", "store", "tuning-results", "validations", "realized",
                  "realized-savings", "loop-cost", "verified-coverage")


def _read(home: Home, scope: Scope, table: TableSchema, columns: list[str] | None = None,
          holds: Callable[[str], bool] | None = None) -> pa.Table:
    """The window's rows (those of the partitions that `holds`, when given) of `table` that the
    scope selects, with `columns` (default: all)."""
    wanted = columns or table.schema.names
    narrowing = [c for c in scope.columns(table.schema.names) if c not in wanted]
    rows = Warehouse(home).read(table, wanted + narrowing, filter_dt=holds or scope.filters.window.holds)
    return scope.select(rows).select(wanted)


def _holdout_runs(home: Home, scope: Scope) -> pa.Table:
    """The window's graph runs that named a store entry (either arm of its holdout)."""
    runs = _read(home, scope, GRAPH_RUNS, [*RUN_COLUMNS, "fingerprint", "env_key"])
    return runs.filter(pc.is_valid(runs.column("config_key")))


def _realized_rows(runs: pa.Table, names: dict[str, str], scope: Scope) -> list[Row]:
    """The rows of `realized` over `runs`, each entry with its graph (named by `names`) and
    environment."""
    where = {row["config_key"]: row for row in runs.select(["config_key", "fingerprint", "env_key"]).to_pylist()}
    rows = [_realized_row(found, where[found.key], names, scope)
            for found in realized_speedups(runs, confidence=REALIZED_LEVEL)]
    return sorted(rows, key=lambda r: (-r["tuned_chip_hours"], r["key"], r["config_version"]))


def _realized_row(found: Realized, where: Row, names: dict[str, str], scope: Scope) -> Row:
    """One entry's row; an expected speedup that no run stated (NaN) is null."""
    row = {
        "key": found.key, "config_version": found.config_version, "kind": found.kind,
        "fingerprint": where["fingerprint"], "name": names.get(where["fingerprint"]),
        "env_key": where["env_key"], "environment": scope.label(where["env_key"]),
        "expected_speedup": found.expected_speedup, **columns(found.speedup), "ci_level": REALIZED_LEVEL,
        "decided": found.decided, "regressed": found.regressed,
        "undecided": found.undecided and found.undecided.value,
        **{f"{name}_{field}": value for name, arm in (("tuned", found.tuned), ("holdout", found.holdout))
           for field, value in (("jobs", arm.jobs), ("runs", arm.runs),
                                ("chip_hours", arm.chip_seconds / 3600))},
    }
    return {name: _json_value(value) for name, value in row.items()}


def _savings_row(name: str, part: RealizedSavings) -> Row:
    interval = part.realized
    return {"slice": name, "team": part.team, "config_version": part.config_version,
            "tuned_chip_hours": part.tuned_chip_seconds / 3600, "booked_chip_hours": part.booked / 3600,
            "booked_decided_chip_hours": part.booked_decided / 3600,
            "realized_chip_hours": interval and interval.estimate / 3600,
            "realized_low": interval and interval.low / 3600, "realized_high": interval and interval.high / 3600,
            "ci_level": REALIZED_LEVEL, "decided_entries": part.decided, "undecided_entries": part.undecided}


def _entries(home: Home) -> pa.Table:
    """The live store's entries: their keys, speedups with intervals, and who wrote them."""
    return Store(home).entries().select(["key", "kind", "fingerprint", "env_key", "speedup", "ci_low", "ci_high",
                                         "provenance"])


def _graph_names(home: Home) -> dict[str, str]:
    """Each graph's name (its module), by fingerprint."""
    return {row["fingerprint"]: row["name"] for row in _names(home).to_pylist() if row["kind"] == "graph"}


def _names(home: Home) -> pa.Table:
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


def _query(scope: Scope, sql: str, params: list[Any] | None = None, **tables: pa.Table) -> list[Row]:
    """The rows of `sql` over `tables`, each with an `env_key` given its environment's label."""
    with _connect(tables) as connection:
        cursor = connection.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        rows = [{k: _json_value(v) for k, v in zip(names, row)} for row in cursor.fetchall()]
    if "env_key" in names:
        for row in rows:
            row["environment"] = scope.label(row["env_key"])
    return rows


def _json_value(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN is no JSON
        return None
    return value
