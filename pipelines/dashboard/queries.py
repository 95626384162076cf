"""The dashboards' data: one query per `/api/` endpoint, over the warehouse and the config store,
registered here by endpoint (QUERIES), with the filters each cannot be narrowed by and the
headline figures the summary makes of their rows.

Every query takes the data root and a Scope (the filters, resolved: see scope.py) and returns
JSON-ready rows (dicts of str, int, float, bool or None). The pages' cards and the endpoints call
the same functions, so a card shows exactly what its endpoint returns. Warehouse tables are read
through `Warehouse.read` (each file's table, version and columns checked), only the window's
partitions, narrowed by the scope, then summed with DuckDB (sql.py); a table nobody has written
yet reads as no rows. Chip-time is in chip-hours (chip-seconds / 3600), shares and rates are
fractions in [0, 1]. A row with an `env_key` also has its `environment` label, and a row with an
interval its `ci_level`: the confidence its measurement was taken at (levels.py).

The queries live in a module per family: savings.py (booked savings, hits, teams), holdouts.py
(realized speedups and savings, the loop's cost), coverage.py (coverage and reach, top keys),
entries.py (the store and the validator), tuning.py (trials, results, flags), graphs.py (graphs
and symbols). Booked savings use the tuner's expected speedup; realized ones the speedup the fleet
showed between the two arms of each entry's holdout (ranking.realized, over the same graph runs).
"""

from __future__ import annotations

from typing import Callable

from pipelines.dashboard.coverage import coverage, top, verified_coverage
from pipelines.dashboard.entries import decisions, staleness, store_versions, validations, validator_hits
from pipelines.dashboard.graphs import graphs, symbols
from pipelines.dashboard.holdouts import loop_cost, realized, realized_days, realized_savings
from pipelines.dashboard.savings import hits, savings, teams
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from pipelines.dashboard.tuning import flags, tuner, tuning_results
from storage.home import Home
from vocabulary.tuning import Kind

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
    graph_hits = [r for r in rows["hits"] if r["source"] == "profiles" and r["kind"] == Kind.GRAPH]
    graph_coverage = [r for r in rows["coverage"] if r["kind"] == Kind.GRAPH]
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
