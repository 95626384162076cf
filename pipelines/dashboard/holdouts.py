"""The queries over the store entries' holdout arms (the window's graph runs that named an
entry, tuned or holding out): each entry's realized speedup, the speedup the fleet showed between
the two arms (ranking.realized, with its interval over jobs at REALIZED_LEVEL), realized savings
beside booked ones, and the loop's own cost against them (ranking.cost)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tables import GRAPH_RUNS
from pipelines.dashboard import lookups, sql
from pipelines.dashboard.levels import REALIZED_LEVEL
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from ranking.cost import loop_cost as ranking_loop_cost
from ranking.cost import return_on_cost
from ranking.realized import RUN_COLUMNS, Realized, RealizedSavings, realized_speedups
from ranking.realized import realized_savings as ranking_realized_savings
from storage.home import Home
from tuner.tables import TRIALS
from validator.tables import VALIDATIONS
from vocabulary.interval import columns


def realized(home: Home, scope: Scope) -> list[Row]:
    """Each store entry (key and store version) whose runs the window holds: the speedup
    expected of it and the one realized in the fleet (holdout arm against tuned arm) with its
    interval over jobs, whether that is decided and a regression (or why it is undecided), and
    each arm's jobs, runs and chip-hours; costliest tuned arm first."""
    return _realized_rows(_holdout_runs(home, scope), lookups.graph_names(home), scope)


def realized_days(home: Home, scope: Scope) -> list[Row]:
    """`realized` per day of the window (`dt`): each entry's realized speedup over that day's
    runs alone, beside the one expected."""
    runs, names = _holdout_runs(home, scope), lookups.graph_names(home)
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
    trials = sql.read(home, scope, TRIALS, ["dt", "task_id", "elapsed_seconds"], holds=lambda dt: dt <= last)
    runs = _holdout_runs(home, scope)
    found = realized_speedups(runs, confidence=REALIZED_LEVEL)
    cost = ranking_loop_cost(trials, sql.read(home, scope, VALIDATIONS, ["dt", "run_id", "validated_at"]), found,
                             scope.filters.window.first, scope.filters.window.last)
    realized = ranking_realized_savings(runs, found).total.realized
    saved = realized.estimate if realized is not None else None
    return [{"days": cost.days, "tuning_chip_hours": cost.tuning / 3600,
             "validation_chip_hours": cost.validation / 3600, "holdout_chip_hours": cost.holdout / 3600,
             "cost_chip_hours": cost.total / 3600, "realized_chip_hours": saved and saved / 3600,
             "return_on_cost": return_on_cost(saved, cost)}]


def _holdout_runs(home: Home, scope: Scope) -> pa.Table:
    """The window's graph runs that named a store entry (either arm of its holdout)."""
    runs = sql.read(home, scope, GRAPH_RUNS, [*RUN_COLUMNS, "fingerprint", "env_key"])
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
    return {name: sql.json_value(value) for name, value in row.items()}


def _savings_row(name: str, part: RealizedSavings) -> Row:
    interval = part.realized
    return {"slice": name, "team": part.team, "config_version": part.config_version,
            "tuned_chip_hours": part.tuned_chip_seconds / 3600, "booked_chip_hours": part.booked / 3600,
            "booked_decided_chip_hours": part.booked_decided / 3600,
            "realized_chip_hours": interval and interval.estimate / 3600,
            "realized_low": interval and interval.low / 3600, "realized_high": interval and interval.high / 3600,
            "ci_level": REALIZED_LEVEL, "decided_entries": part.decided, "undecided_entries": part.undecided}
